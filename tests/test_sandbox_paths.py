"""A sandboxed child imports what the judge's Python imports, wherever that lives.

The child's root has an empty /tmp of its own (new_root.py), yet a venv or a
checkout under /tmp, reached through a symlink, is a normal place for a
judge's Python: modules the child imports late (torch's, kernelevo's) must be
found there under the names the judge's Python gives them.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

_PROBE = '''
import importlib, sys

def import_late(payload, channel):
    """Import modules neither the judge nor the forkserver imported; say from where."""
    found = {}
    for name in payload["modules"]:
        loaded = name in sys.modules
        try:
            found[name] = [loaded, importlib.import_module(name).__file__]
        except ImportError as exc:
            found[name] = [loaded, f"ImportError: {exc}"]
    channel.send("imported", found=found, executable=sys.executable)
'''

_JUDGE = '''
import json, sys
from pathlib import Path
from kernelevo.evaluate.sandbox.jobs import run_job
from late_probe import import_late
result = run_job(import_late, {"modules": sys.argv[2:]}, Path(sys.argv[1]), timeout_s=60,
                 output_limit_bytes=1 << 20)
print(json.dumps({"messages": result.messages, "exit": result.exit_code,
                  "log": result.log_tail}))
'''

LATE = ("kernelevo.evaluate.analysis.roofline", "torch.utils.serialization")


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="needs the tests to run in a venv")
def test_a_child_imports_late_from_a_linked_venv_and_a_linked_checkout_under_tmp(tmp_path):
    # A copy of the package, reached through a link, as a checkout in /tmp is.
    shutil.copytree(ROOT / "src/kernelevo", tmp_path / "checkout/kernelevo",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "checkout/late_probe.py").write_text(_PROBE)
    (tmp_path / "linked").symlink_to(tmp_path / "checkout")
    # This venv, reached through a link: its Python names its files through it.
    (tmp_path / "venv").symlink_to(os.path.realpath(sys.prefix))
    python = tmp_path / "venv/bin/python"
    done = subprocess.run(
        [str(python), "-c", _JUDGE, str(tmp_path / "job"), *LATE],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "linked")}, cwd=tmp_path,
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    (message,) = [m for m in result["messages"] if m["kind"] == "imported"]
    assert message["executable"] == str(python)
    found = message["found"]
    late_kernelevo, late_torch = (found[name] for name in LATE)
    assert late_kernelevo == [False, str(tmp_path / "linked/kernelevo/evaluate/analysis/roofline.py")]
    assert late_torch[0] is False
    assert late_torch[1].startswith(str(tmp_path / "venv/lib/")), late_torch
    assert result["exit"] == 0, result["log"]
    # In a root of its own all the same, every mount and link made as planned.
    (isolation,) = [m for m in result["messages"] if m["kind"] == "isolation"]
    layers = " ".join(isolation["layers"])
    assert "own root" in layers and "not as planned" not in layers, layers
