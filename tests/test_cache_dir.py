"""Bytecode kept in the cache folder where the environment forbids writing it beside sources."""

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

_PROBE = ("import json, os, sys, kernelevo.cli; print(json.dumps([sys.pycache_prefix, "
          "sys.dont_write_bytecode, os.environ.get('PYTHONPYCACHEPREFIX'), "
          "'PYTHONDONTWRITEBYTECODE' in os.environ]))")


def _probe(tmp_path, **environment):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env.update(KERNELEVO_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT / "src"),
               **environment)
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_bytecode_goes_to_the_cache_folder_when_the_environment_forbids_writing_it(tmp_path):
    folder = tmp_path / "cache" / "pycache"
    assert _probe(tmp_path, PYTHONDONTWRITEBYTECODE="1") == [str(folder), False, str(folder),
                                                              False]
    # Modules imported after the command line's start were written there, none elsewhere.
    written = list(folder.rglob("*.pyc"))
    assert any("typer" in str(path) for path in written), written[:5]


def test_nothing_changes_where_bytecode_may_be_written_or_when_turned_off(tmp_path):
    assert _probe(tmp_path) == [None, False, None, False]
    assert _probe(tmp_path, PYTHONDONTWRITEBYTECODE="1", KERNELEVO_BYTECODE_CACHE="0") == [
        None, True, None, True]
    prefix = str(tmp_path / "mine")
    assert _probe(tmp_path, PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=prefix) == [
        prefix, True, prefix, True]
    assert not (tmp_path / "cache" / "pycache").exists()
