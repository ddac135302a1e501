"""Tasks whose backward is judged, through the real judge on the CPU (Triton's interpreter).

The bad candidates of the layer norm example are fixtures (tests/fixtures/
manifest.toml, run by test_fixtures.py); here the honest one, the flags that
turn the backward on, a backward right only at the task's sizes, and a task
whose reference cannot be differentiated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kernelevo.candidate import Candidate, load_candidate
from kernelevo.config import EvalConfig
from kernelevo.errors import TaskError
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.task import load_task, task_from_source
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "layernorm_backward"
FIXTURE_TASK = ROOT / "tests" / "fixtures" / "tasks" / "layernorm_backward.py"


def test_the_honest_forward_and_backward_passes_at_the_tasks_and_other_sizes():
    judge = Judge(load_task(str(EXAMPLE / "task.py")), EvalConfig())
    verdict = judge.evaluate(load_candidate(EXAMPLE / "triton_candidate.py"))
    assert verdict.status == "ok", f"{verdict.reason}: {verdict.message}\n{verdict.logs[-2000:]}"
    checked = [note for note in verdict.notes if note.startswith("gradients checked")]
    assert checked and "input 0 (x), parameter ln.weight, parameter ln.bias" in checked[0]
    assert "atol 0.0001, rtol 0.0001" in checked[0]
    assert any(note.startswith("also correct at") for note in verdict.notes)


def test_a_backward_right_only_at_the_tasks_sizes_is_shape_specialised():
    # On the CPU the task's dim is 201 (shrunk for the interpreter); the mean of
    # w * dy is taken over a hard-coded 201 columns.
    source = (EXAMPLE / "triton_candidate.py").read_text()
    line = "c_mean = tl.sum(wdy, axis=0) / n_cols"
    assert line in source
    specialised = Candidate(source.replace(line, "c_mean = tl.sum(wdy, axis=0) / 201"),
                            backend="triton", name="specialised")
    judge = Judge(load_task(str(FIXTURE_TASK)), EvalConfig())
    assert "dim=201" in judge.notes[0]
    verdict = judge.evaluate(specialised)
    assert verdict.reason == "shape_specialised", f"{verdict.reason}: {verdict.message}"
    assert "gradient_mismatch" in verdict.message and "gradient of input 0 (x)" in \
        verdict.message


def test_backward_flag_on_a_kernelbench_task_asks_for_gradients_a_forward_kernel_lacks():
    folder = ROOT / "examples" / "layernorm"  # no `backward` in the task: forward only
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "kernelevo.cli.app", "eval", "--local",
                           "--backward", "--no-vary-shapes", "--json",
                           str(folder / "task.py"), str(folder / "triton_candidate.py")],
                          cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    verdict = json.loads(done.stdout)
    assert (verdict["status"], verdict["reason"]) == ("incorrect", "not_differentiable")
    assert "torch.autograd.Function" in verdict["message"]


def test_a_task_asking_for_a_backward_it_cannot_have_is_a_task_error():
    source = """
import torch
import torch.nn as nn

n = 64
backward = True


class Model(nn.Module):
    def forward(self, x):
        return x.argmax(dim=-1)


def get_inputs():
    return [torch.randn(n, n)]


def get_init_inputs():
    return []
"""
    candidate = (ROOT / "tests" / "fixtures" / "candidates" / "honest_add.py").read_text()
    judge = Judge(task_from_source(source, name="argmax"), EvalConfig(vary_shapes=False))
    with pytest.raises(TaskError, match="backward = True.*not differentiable"):
        judge.evaluate(Candidate(candidate, backend="triton", name="any"))
