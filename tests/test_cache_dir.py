"""Bytecode kept in the cache folder where none is shipped and the environment forbids writing it."""

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

_PROBE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
from kernelevo.cache_dir import keep_bytecode
kept = keep_bytecode(probe=sys.argv[2])
import fakepkg
print(json.dumps([str(kept) if kept else None, sys.pycache_prefix, sys.dont_write_bytecode,
                  os.environ.get('PYTHONPYCACHEPREFIX'), 'PYTHONDONTWRITEBYTECODE' in os.environ]))
"""


def _probe(tmp_path, probe="fakepkg", **environment):
    package = tmp_path / "lib" / "fakepkg"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "KERNELEVO_PYCACHE")}
    env.update(KERNELEVO_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT / "src"),
               **environment)
    done = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "lib"), probe], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_bytecode_goes_to_the_cache_folder_where_none_is_shipped_or_written(tmp_path):
    folder = str(tmp_path / "cache" / "pycache")
    assert _probe(tmp_path, PYTHONDONTWRITEBYTECODE="1") == [folder, folder, False, folder,
                                                              False]
    written = [p.name for p in (tmp_path / "cache" / "pycache").rglob("*.pyc")]
    assert any(name.startswith("__init__") for name in written), written
    assert not (tmp_path / "lib" / "fakepkg" / "__pycache__").exists()


def test_a_child_started_with_the_prefix_writes_there_too(tmp_path):
    """multiprocessing starts the forkserver with -B; the prefix says it is ours."""
    folder = str(tmp_path / "mine")
    assert _probe(tmp_path, PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=folder,
                  KERNELEVO_PYCACHE=folder) == [folder, folder, False, folder, True]


def test_nothing_changes_where_bytecode_is_shipped_written_or_the_user_chose(tmp_path):
    # torch ships its bytecode in this environment: a prefix would hide it.
    assert _probe(tmp_path, probe="torch", PYTHONDONTWRITEBYTECODE="1")[:3] == [None, None, True]
    assert _probe(tmp_path) == [None, None, False, None, False]
    assert _probe(tmp_path, PYTHONDONTWRITEBYTECODE="1", KERNELEVO_BYTECODE_CACHE="0") == [
        None, None, True, None, True]
    prefix = str(tmp_path / "users")
    assert _probe(tmp_path, PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=prefix) == [
        None, prefix, True, prefix, True]
    assert not (tmp_path / "cache" / "pycache").exists()
