"""The judge's own process on a GPU (run with -m gpu on the GPU machine)."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.gpu

SOFTMAX = ROOT / "examples" / "softmax"

WARMED_AHEAD = f"""
import threading
from kernelevo.config import EvalConfig
from kernelevo.evaluate import decide
from kernelevo.evaluate.gate import gate_for
from kernelevo.evaluate.judge import Judge
from kernelevo.task import load_task

calls, original = [], decide.warm_comparisons
decide.warm_comparisons = lambda device: (original(device), calls.append(device))
task = load_task({str(SOFTMAX / "task.py")!r})
Judge(task, EvalConfig())
(warm,) = [t for t in threading.enumerate() if t.name == "kernelevo-warm-comparisons"]
warm.join(120)
assert not warm.is_alive() and calls == ["cuda:0"], calls
assert gate_for("cuda", None).holders() == (0, False)
Judge(task, EvalConfig())  # once per process
assert not [t for t in threading.enumerate() if t.name == "kernelevo-warm-comparisons"]
print("warmed once")
"""


def test_a_judge_warms_its_comparisons_once_per_process_and_lets_the_gate_go():
    done = subprocess.run([sys.executable, "-c", WARMED_AHEAD], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0 and "warmed once" in done.stdout, done.stderr[-3000:]


def test_eval_ends_cleanly_while_the_judge_still_warms_its_comparisons(tmp_path):
    # A static verdict comes at once, while the warm-up thread may still run.
    candidate = tmp_path / "fallback.py"
    candidate.write_text("import torch\nimport triton\n\n\nclass ModelNew(torch.nn.Module):\n"
                         "    def forward(self, x):\n        try:\n            return x.softmax(-1)\n"
                         "        except Exception:\n            return torch.softmax(x, dim=-1)\n")
    done = subprocess.run([sys.executable, "-m", "kernelevo.cli.app", "eval",
                           str(SOFTMAX / "task.py"), str(candidate), "--local"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "try_fallback" in done.stdout
    for crash in ("terminate called", "Segmentation fault", "Traceback", "core dumped"):
        assert crash not in done.stderr, done.stderr[-3000:]
