"""What the forkserver learns to import ahead: kept per versions, only torch's and Triton's modules."""

import json
import os
import subprocess
import sys

import pytest

from kernelevo.evaluate.shared import preload_modules
from tests.conftest import ROOT


def test_only_modules_of_torch_and_its_stack_are_kept():
    names = ["torch._inductor.lowering", "sympy.combinatorics.permutations", "triton.language",
             "kernelevo_task", "os.path", "candidate_module", "torch.x;import os",
             "torch._inductor.runtime.compile_tasks.c4afbdes4zgrcivx", 42,
             "torch." + "a" * 60]
    assert preload_modules.keepable(names) == [
        "sympy.combinatorics.permutations", "torch._inductor.lowering", "triton.language"]


def test_names_are_remembered_per_versions_and_merged(tmp_path):
    assert preload_modules.read(tmp_path) == []
    preload_modules.remember(tmp_path, ["torch._inductor.lowering", "kernelevo_task"])
    preload_modules.remember(tmp_path, ["torch._inductor.graph"])
    assert preload_modules.read(tmp_path) == ["torch._inductor.graph", "torch._inductor.lowering"]
    kept = json.loads((tmp_path / preload_modules.FILE).read_text())
    assert list(kept) == [preload_modules.versions_key()]
    # Another version's list is not read for this one.
    (tmp_path / preload_modules.FILE).write_text(json.dumps({"python 0 torch 0": ["torch.fx"]}))
    assert preload_modules.read(tmp_path) == []


def test_a_damaged_file_reads_as_nothing_and_is_replaced(tmp_path):
    (tmp_path / preload_modules.FILE).write_text("{not json")
    assert preload_modules.read(tmp_path) == []
    preload_modules.remember(tmp_path, ["torch.fx"])
    assert preload_modules.read(tmp_path) == ["torch.fx"]


@pytest.mark.gpu
def test_a_gpu_worker_reports_what_its_first_compile_imported(tmp_path):
    """In a fresh process (a forkserver that has preloaded nothing learned yet)."""
    softmax = ROOT / "examples" / "softmax"
    script = ("import sys, kernelevo; v = kernelevo.evaluate(sys.argv[1], sys.argv[2], "
              "device='cuda'); print(v.reason)")
    env = {**os.environ, "KERNELEVO_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", script, str(softmax / "task.py"),
                           str(softmax / "triton_candidate.py")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.stdout.strip().splitlines()[-1:] == ["passed"], done.stderr[-3000:]
    learned = preload_modules.read(tmp_path)
    assert any(name.startswith("torch._inductor.") for name in learned), learned[:20]
