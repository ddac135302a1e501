"""Weights a task builds with one value throughout: found by the oracle, told in a passing verdict.

KernelBench's LayerNorm keeps nn.LayerNorm's weight of ones and bias of
zeros; judged with them, a kernel that drops the affine passes. The verdict
says so in a note, never a failure, and the model's feedback leaves it out.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.evaluate.parent.outcome import constants_note
from kernelevo.evaluate.shared.inputs import constant_tensors
from kernelevo.evaluate.verdict import CONSTANTS_NOTE, verdict_for
from kernelevo.propose.prompt import feedback
from kernelevo.task import load_task
from tests.conftest import ROOT


class _Weights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(8)  # weight all 1, bias all 0
        self.scale = nn.Parameter(torch.full((4,), 0.5))
        self.drawn = nn.Parameter(torch.randn(4))
        self.alone = nn.Parameter(torch.ones(1))  # one element: nothing to tell apart
        self.register_buffer("mask", torch.zeros(3, 3))
        self.register_buffer("steps", torch.zeros(5, dtype=torch.int64))  # not a weight
        self.register_buffer("holes", torch.full((2,), float("nan")))


def test_constant_parameters_and_floating_buffers_are_found_by_name_and_value():
    # the module's own first, then its submodules', as named_parameters() goes
    assert constant_tensors(_Weights()) == ["scale (all 0.5)", "ln.weight (all 1)",
                                            "ln.bias (all 0)", "mask (buffer, all 0)"]
    assert constant_tensors(nn.Linear(4, 4)) == []  # drawn at random
    assert constant_tensors(object()) == []  # a Model that is no nn.Module


def test_batchnorm_running_statistics_count_only_where_the_forward_reads_them():
    torch.manual_seed(0)
    trained = nn.BatchNorm1d(4)
    trained(torch.randn(16, 4))  # training mode: the forward moves them
    assert constant_tensors(trained) == ["weight (all 1)", "bias (all 0)"]
    read = nn.BatchNorm1d(4).eval()
    read(torch.randn(16, 4))
    assert constant_tensors(read) == ["weight (all 1)", "bias (all 0)",
                                      "running_mean (buffer, all 0)",
                                      "running_var (buffer, all 1)"]


def test_the_note_lists_six_names_and_counts_the_rest():
    assert constants_note(()) is None
    note = constants_note(("ln.weight (all 1)", "ln.bias (all 0)"))
    assert note == ("constant parameters: ln.weight (all 1), ln.bias (all 0): the task builds "
                    "them so, and a kernel that ignores them passes; give them random values in "
                    "the task's __init__ to have them checked")
    many = constants_note(tuple(f"p{i} (all 0)" for i in range(9)))
    assert many is not None and "p5 (all 0) and 3 more: the task" in many and "p6" not in many


def test_the_models_feedback_leaves_the_note_out():
    note = constants_note(("ln.weight (all 1)",))
    assert note is not None and note.startswith(CONSTANTS_NOTE)
    verdict = verdict_for("passed", notes=(note, "also correct at dim=97"))
    text = feedback(verdict)
    assert "ln.weight" not in text and "note: also correct at dim=97" in text


def test_a_layernorm_task_with_default_weights_passes_with_the_note():
    folder = ROOT / "examples" / "layernorm"
    judge = Judge(load_task(str(folder / "task.py")), EvalConfig(vary_shapes=False))
    verdict = judge.evaluate(load_candidate(folder / "triton_candidate.py"))
    assert verdict.reason == "passed", f"{verdict.reason}: {verdict.message}"
    assert constants_note(("ln.weight (all 1)", "ln.bias (all 0)")) in verdict.notes
    assert not any("constant parameters" in flag for flag in verdict.flags)


def test_a_task_that_draws_its_weights_has_no_note():
    folder = ROOT / "examples" / "layernorm_backward"
    judge = Judge(load_task(str(folder / "task.py")), EvalConfig(vary_shapes=False))
    verdict = judge.evaluate(load_candidate(folder / "triton_candidate.py"))
    assert verdict.reason == "passed", f"{verdict.reason}: {verdict.message}"
    assert not any(note.startswith(CONSTANTS_NOTE) for note in verdict.notes)
