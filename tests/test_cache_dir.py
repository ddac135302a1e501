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


def test_a_cache_key_is_the_sha256_of_its_parts_joined_by_nul():
    import hashlib

    from kernelevo.cache_dir import KEY_DIGITS, cache_key

    whole = hashlib.sha256(b"source\0flags").hexdigest()
    assert cache_key("source", "flags", digits=None) == whole
    assert cache_key("source", "flags") == whole[:KEY_DIGITS]
    assert cache_key("source", "flags", digits=24) == whole[:24]
    assert cache_key("source", "flags") != cache_key("sourceflags")


def test_keys_already_on_users_disks_keep_their_values():
    """Builds, memory task keys, source hashes and model module names made before."""
    from kernelevo.candidate import Candidate
    from kernelevo.evaluate.cuda.build import build_key
    from kernelevo.memory.signature import task_key
    from kernelevo.model.contract import module_name_for

    assert task_key("x = 1\n") == "9e26bf369911c45c"
    assert Candidate("x = 1\n", "pytorch").source_hash.startswith("9e26bf369911c45c")
    assert len(Candidate("x = 1\n", "pytorch").source_hash) == 64
    assert module_name_for("block", "x = 1\n") == "_model_block_9e26bf3699"
    assert len(build_key(["decl;"], ["kernel"], ["f"], {})) == 16


def test_every_hash_key_is_made_by_cache_key():
    """One recipe: only cache_dir hashes, and the modules that cannot import it."""
    cannot_import = {"cache_dir.py", "shims_host.py", "shims_nvcc.py",  # stand-ins: no KernelEvo
                     "baseline_store.py"}  # to move: cache_key(..., digits=24) keeps its stores
    hashing = sorted(path.name for path in (ROOT / "src" / "kernelevo").rglob("*.py")
                     if "hashlib." in path.read_text())
    assert set(hashing) <= cannot_import, set(hashing) - cannot_import


def test_a_fresh_folder_gets_its_packages_compiled_ahead_once(tmp_path, monkeypatch):
    """On a fresh machine compileall fills the folder on every core, in the background, once."""
    import time

    from kernelevo import cache_dir

    package = tmp_path / "lib" / "aheadpkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    (package / "sub" / "deep.py").write_text("DEEP = 2\n")
    (package / "tests").mkdir()
    (package / "tests" / "test_it.py").write_text("X = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    folder = tmp_path / "pycache"
    folder.mkdir()

    monkeypatch.setattr(cache_dir.os, "cpu_count", lambda: 2)
    assert not cache_dir.compile_ahead(folder, ("aheadpkg",))  # two cores: the import's own
    monkeypatch.setattr(cache_dir.os, "cpu_count", lambda: 16)
    assert not cache_dir.compile_ahead(folder, ("no_such_package_here",))
    assert cache_dir.compile_ahead(folder, ("aheadpkg",))
    assert not cache_dir.compile_ahead(folder, ("aheadpkg",))  # started once per folder

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        names = {p.name.split(".")[0] for p in folder.rglob("*.pyc")}
        if {"__init__", "deep"} <= names:
            break
        time.sleep(0.2)
    assert {"__init__", "deep"} <= names, names
    assert "test_it" not in names  # tests are not what a judge imports
    assert not (package / "__pycache__").exists()  # nothing beside the sources


def test_a_per_gpu_file_is_named_by_the_model_and_written_whole(tmp_path):
    from kernelevo.cache_dir import per_gpu_file, write_json_whole

    path = per_gpu_file(tmp_path, "lane_peaks", "NVIDIA H100 80GB HBM3")
    assert path == tmp_path / "lane_peaks" / "nvidia-h100-80gb-hbm3.json"
    assert per_gpu_file(tmp_path, "baselines", "???").name == "gpu.json"
    write_json_whole(path, {"tasks": {"k": 1}})
    write_json_whole(path, {"tasks": {"k": 2}})
    assert json.loads(path.read_text()) == {"tasks": {"k": 2}}
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no scratch file left
