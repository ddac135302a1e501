"""The kink rule of the gradient check (decide_backward.py), with hand-made gradients.

A ReLU layer's gradients, `dx = (g * mask) @ W`, `dW = (g * mask)^T @ x` and
`db = sum(g * mask)`, where a few mask elements flip as a pre-activation
within rounding of zero would: each flip moves a whole row of dx and dW and
one element of db. The reference's float64 gradient flips others, which is
its own error; the candidate's flips are its own summation order's.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig

from kernelevo.evaluate.analysis.decide_backward import (KINK_FACTOR, decide_backward,
                                                         reference_gradients, within_own_error)
from kernelevo.evaluate.analysis.reference import OwnError, ReferenceGradients, ReferenceResult
from kernelevo.evaluate.analysis.tolerance import compare_tensor
from kernelevo.evaluate.child import oracle_backward
from kernelevo.evaluate.child.oracle_backward import reference_backward
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.gradients import REPEAT_SCALE, forward_backward
from kernelevo.evaluate.shared.messages import ORACLE_KINDS, CheckedCandidate, OracleDone, decode
from kernelevo.evaluate.verdict import ErrorMetrics
from kernelevo.task import load_task
from tests.conftest import ROOT

KINK_TASK = ROOT / "tests" / "fixtures" / "tasks" / "relu_kinks.py"
NAMES = ("input 0 (x)", "parameter weight", "parameter bias")
ROWS, COLUMNS, FEATURES = 64, 96, 80
TOLERANCE = (1e-4, 1e-4)
# Flipped mask elements (row, column) on each of the three sets: the reference's
# own (against float64), and the candidate's (against the reference).
OWN_FLIPS = [[(3, 5), (17, 40)], [(9, 11)], [(40, 3), (41, 90)]]
CANDIDATE_FLIPS = [[(8, 9), (30, 70), (50, 2)], [(12, 12), (60, 33)], [(1, 1)]]


def _layer(number: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + number)
    projection = torch.randn(ROWS, COLUMNS, generator=generator)
    weight = torch.randn(COLUMNS, FEATURES, generator=generator) / FEATURES ** 0.5
    x = torch.randn(ROWS, FEATURES, generator=generator)
    mask = torch.rand(ROWS, COLUMNS, generator=generator) > 0.5
    return projection, weight, x, mask


def _gradients(number: int, flips: list[tuple[int, int]],
               dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    projection, weight, x, mask = _layer(number)
    mask = mask.clone()
    for row, column in flips:
        mask[row, column] = ~mask[row, column]
    masked = (projection * mask).to(dtype)
    return [masked @ weight.to(dtype), masked.t() @ x.to(dtype), masked.sum(0)]


def _own_errors() -> tuple[OwnError, ...]:
    """The reference's own error per gradient against float64, the largest over the sets."""
    found: list[OwnError | None] = [None] * len(NAMES)
    for number, flips in enumerate(OWN_FLIPS):
        exact = _gradients(number, flips, torch.float64)
        for position, (ours, wide) in enumerate(zip(_gradients(number, []), exact)):
            compared = compare_tensor(ours, wide.float(), *TOLERANCE)
            assert compared.metrics is not None
            earlier = found[position] or OwnError(0.0, 0.0, False)
            found[position] = OwnError(
                max(earlier.rel_l2_error, compared.metrics.rel_l2_error),
                max(earlier.mismatch_fraction, compared.metrics.mismatch_fraction),
                earlier.inexact or compared.reason is not None)
    return tuple(error for error in found if error is not None)


def _reference(own: tuple[OwnError | None, ...] = (), unmeasured: str = "",
               stress: dict[int, str] | None = None) -> ReferenceResult:
    by_set = {number: _gradients(number, []) for number in range(len(OWN_FLIPS))}
    backward = ReferenceGradients(by_set=by_set, names=NAMES, tolerances=(TOLERANCE,) * 3,
                                  ops=frozenset({"mm", "sum"}), own_errors=own,
                                  own_unmeasured=unmeasured)
    outputs = tuple([torch.randn(ROWS, COLUMNS)] for _ in by_set)
    return ReferenceResult(outputs=outputs, seeds=tuple(by_set), variants=(None,) * 3,
                           stress=stress or {}, passthrough=(), structure="tensor",
                           ops=frozenset({"mm"}), flops=0, bytes_moved=0,
                           tolerances=(TOLERANCE,), backward=backward)


def _candidate(reference: ReferenceResult) -> dict[str, list[torch.Tensor]]:
    """A candidate whose own summation order flips other mask elements than the reference."""
    bundle = {f"grad_{number}": _gradients(number, flips)
              for number, flips in enumerate(CANDIDATE_FLIPS)}
    bundle["grad_repeat"] = [g * REPEAT_SCALE for g in bundle["grad_0"]]
    bundle["grad_knockout"] = [torch.full_like(g, float("nan")) for g in bundle["grad_1"]]
    bundle.update({f"grad_out_{n}": [v.clone() for v in values]
                   for n, values in enumerate(reference.outputs)})
    return bundle


def _decide(bundle, reference: ReferenceResult, backend: str = "triton"):
    report = CheckedCandidate(candidate=0, bundle={}, grad_names=NAMES,
                              custom_functions=("LinearReLUBackward",),
                              grad_fns=("LinearReLUBackward",), backward_launches=4)
    assert reference.backward is not None
    return decide_backward(report, bundle, reference, reference.backward, backend, "default",
                           "cpu")


def test_the_hand_made_flips_fail_the_elementwise_test_and_the_reference_misses_float64_too():
    for position, own in enumerate(_own_errors()):
        assert own.inexact and 0 < own.mismatch_fraction < 0.1, (NAMES[position], own)
    reference = _reference()  # nothing measured: the elementwise test alone
    decision = _decide(_candidate(reference), reference)
    assert decision.reason == "gradient_mismatch"
    assert decision.message.startswith("gradient of input 0 (x) on input set 0")
    assert "float64" not in decision.message  # the message as it was before the rule


def test_flipped_rows_the_size_of_the_references_own_error_pass_with_a_note():
    reference = _reference(_own_errors())
    decision = _decide(_candidate(reference), reference)
    assert decision.reason is None, decision.message
    kinks = [note for note in decision.notes if "held to the reference's own error" in note]
    assert len(kinks) == 3, decision.notes  # one per gradient, on its worst set
    dx = next(note for note in kinks if note.startswith("gradient of input 0 (x)"))
    assert "of its elements outside the tolerance" in dx and "relative L2 error" in dx
    own = _own_errors()[0].rel_l2_error
    assert (f"against the reference's own {own:.3g} from its float64 gradient and its runs on "
            "moved inputs") in dx
    assert any(note.startswith("gradients checked") for note in decision.notes)


def test_a_reference_exact_against_float64_leaves_the_elementwise_rule_alone():
    exact = tuple(OwnError(0.0, 0.0, False) for _ in NAMES)
    reference = _reference(exact)
    decision = _decide(_candidate(reference), reference)
    assert decision.reason == "gradient_mismatch"
    assert "the reference's own gradient passes the same test against float64 and its runs" in \
        decision.message and "nothing beyond the tolerance is allowed" in decision.message
    # Some error, but within the tolerance: still no allowance.
    close = _reference(tuple(replace(own, inexact=False) for own in _own_errors()))
    assert _decide(_candidate(close), close).reason == "gradient_mismatch"


def test_a_skipped_row_fails_even_with_an_allowance_and_says_what_would_have_passed():
    reference = _reference(_own_errors())
    bundle = _candidate(reference)
    bundle["grad_1"][0][7] = 0.0  # one row of dx never written
    decision = _decide(bundle, reference)
    assert decision.reason == "gradient_mismatch"
    assert decision.message.startswith("gradient of input 0 (x) on input set 1")
    assert ("the reference's own gradient misses float64 or its runs on moved inputs too"
            in decision.message)
    assert "would have passed" in decision.message


@pytest.mark.parametrize("position, skipped", [
    (2, slice(None)),  # the bias gradient left zero
    (1, slice(0, 16)),  # a tile of dW's rows
    (0, slice(32, 48))])  # a tile of dx's rows
def test_skipped_work_fails_with_an_allowance(position, skipped):
    reference = _reference(_own_errors())
    bundle = _candidate(reference)
    bundle["grad_2"][position][skipped] = 0.0
    decision = _decide(bundle, reference)
    assert decision.reason == "gradient_mismatch", decision.message
    assert decision.message.startswith(f"gradient of {NAMES[position]} on input set 2")


def test_nan_fails_whatever_the_allowance():
    reference = _reference(_own_errors())
    bundle = _candidate(reference)
    bundle["grad_0"][0][3, 4] = float("nan")
    decision = _decide(bundle, reference)
    assert decision.reason == "gradient_mismatch" and "NaN/Inf" in decision.message


def test_a_lower_precision_everywhere_fails_though_its_l2_error_is_small():
    reference = _reference(_own_errors())
    bundle = _candidate(reference)
    generator = torch.Generator().manual_seed(9)
    for number in range(3):  # about TF32's rounding: 3e-4 relative on every element
        bundle[f"grad_{number}"] = [
            g * (1 + 3e-4 * torch.randn(g.shape, generator=generator))
            for g in _gradients(number, [])]
    decision = _decide(bundle, reference)
    assert decision.reason == "gradient_mismatch", decision.message


def test_the_rule_in_numbers():
    own = OwnError(rel_l2_error=1e-3, mismatch_fraction=0.004, inexact=True)

    def metrics(rel_l2: float, share: float) -> ErrorMetrics:
        return ErrorMetrics(0.01, 0.1, share, rel_l2, atol=1e-4, rtol=1e-4)

    assert within_own_error(metrics(KINK_FACTOR * 1e-3, 0.036), own)
    assert not within_own_error(metrics(KINK_FACTOR * 1e-3 * 1.01, 0.001), own)
    assert not within_own_error(metrics(1e-4, 0.037), own)  # too many elements outside
    assert not within_own_error(metrics(1e-4, 0.001), replace(own, inexact=False))
    broken = OwnError(rel_l2_error=0.5, mismatch_fraction=0.5, inexact=True)
    assert not within_own_error(metrics(1.0, 1.0), broken)  # zeros, against a broken reference
    assert not within_own_error(metrics(0.11, 0.2), broken)


def test_a_stress_set_and_the_repeated_call_follow_the_rule_too():
    reference = _reference(_own_errors(), stress={2: "stress set of scale 60"})
    bundle = _candidate(reference)
    assert _decide(bundle, reference).reason is None
    bundle["grad_2"][0][20:40] = 0.0
    decision = _decide(bundle, reference)
    assert decision.reason == "stress_inputs_failed"
    assert "would have passed" in decision.message
    cached = _candidate(reference)
    cached["grad_repeat"] = [g.clone() for g in cached["grad_0"]]  # not scaled: kept
    decision = _decide(cached, reference)
    assert decision.reason == "cached_gradients" and "would have passed" in decision.message


def test_an_unmeasured_allowance_is_said_in_a_passing_verdict():
    why = "its float64 run failed: RuntimeError: no float64 kernel"
    reference = _reference((None, None, None), unmeasured=why)
    exact_candidate = {**_candidate(reference),
                       **{f"grad_{n}": _gradients(n, []) for n in range(3)}}
    exact_candidate["grad_repeat"] = [g * REPEAT_SCALE for g in exact_candidate["grad_0"]]
    decision = _decide(exact_candidate, reference)
    assert decision.reason is None, decision.message
    assert any(why in note and "elementwise test alone" in note for note in decision.notes)
    assert _decide(_candidate(reference), reference).reason == "gradient_mismatch"


def test_a_gradient_within_the_allowance_with_the_kernels_off_still_counts_as_unchanged():
    reference = _reference(_own_errors())
    bundle = _candidate(reference)
    bundle["grad_knockout"] = [g.clone() for g in bundle["grad_1"]]  # PyTorch computes it
    assert _decide(bundle, reference).reason == "ghost_backward"


# The reference's own error, measured in the oracle's process

def _kink_task():
    specification = importlib.util.spec_from_file_location("relu_kinks", KINK_TASK)
    assert specification is not None and specification.loader is not None
    module = importlib.util.module_from_spec(specification)
    specification.loader.exec_module(module)
    return module


def _backward(model, module, dtype=torch.float32, variants=(None, None, 40.0)):
    return reference_backward(model, module, [11, 12, 13][:len(variants)], list(variants),
                              "cpu", dtype, EvalConfig())


def test_the_oracle_measures_the_references_own_error_with_one_float64_backward_a_set(
        monkeypatch):
    module = _kink_task()
    model = task_inputs.build_model(module.Model, module.get_init_inputs(), "cpu",
                                    torch.float32)
    calls: list[torch.dtype] = []

    def counted(model, inputs, seed, **options):
        calls.append(inputs[0].dtype)
        return forward_backward(model, inputs, seed, **options)

    monkeypatch.setattr(oracle_backward, "forward_backward", counted)
    bundle, report = _backward(model, module)
    assert calls.count(torch.float64) == 3  # the stress set too
    # and two runs on moved inputs for each judged set
    assert calls.count(torch.float32) == 3 + oracle_backward.PERTURBED_RUNS * len(
        report["grad_sets"])
    assert report["grad_sets"][:2] == (0, 1) and set(bundle) == {
        f"grad_{n}" for n in report["grad_sets"]}
    assert all(report["grad_float64_failed"]), report  # the kinks: fp32 misses float64
    assert all(0 < l2 < 0.05 for l2 in report["grad_float64_l2"])
    assert all(0 < share < 0.1 for share in report["grad_float64_mismatch"])
    assert "grad_float64_problem" not in report
    # It reaches the judge through the oracle's last message.
    done = OracleDone(kept_sets=(0, 1), variants_used=(None, None), stress={},
                      structure="tensor", ops=(), flops=0, bytes=0,
                      output_dtypes=("float32",), **report)
    arrived = decode(json.loads(json.dumps(done.to_json())), ORACLE_KINDS)
    assert isinstance(arrived, OracleDone)
    kept = reference_gradients(arrived, bundle, EvalConfig())
    assert [own.inexact for own in kept.own_errors if own] == [True, True, True]
    assert kept.own_errors[0] == OwnError(report["grad_float64_l2"][0],
                                          report["grad_float64_mismatch"][0], True)


def test_a_reference_whose_float64_check_shows_no_flip_still_shows_its_kinks_when_moved(
        monkeypatch):
    """Whether the reference's one float64 comparison flips a kink is chance (about half a flip
    a set on KernelBench level-2 76, bench/kink_rate.py); its runs on inputs moved at rounding
    level show the same sensitivity an honest kernel's other summation order meets."""
    module = _kink_task()
    model = task_inputs.build_model(module.Model, module.get_init_inputs(), "cpu",
                                    torch.float32)

    measure = oracle_backward.float64_check

    def lucky(model, module, seed, device, dtype, scale, result, *rest):
        # as if its rounding had landed every kink on float64's side, on every set
        check = measure(model, module, seed, device, dtype, scale, result, *rest)
        assert check.forward_error is not None and check.forward_error > 0
        return replace(check, measured=[(1e-7, 0.0, False)] * len(result.gradients))

    monkeypatch.setattr(oracle_backward, "float64_check", lucky)
    _, report = _backward(model, module, variants=(None, None))
    assert all(report["grad_float64_failed"]), report
    assert all(1e-5 < l2 < 0.05 for l2 in report["grad_float64_l2"]), report
    monkeypatch.setattr(oracle_backward, "PERTURBED_RUNS", 0)
    _, before = _backward(model, module, variants=(None, None))
    assert not any(before["grad_float64_failed"]), before  # the rule's old blind spot


class _Indexed(torch.nn.Module):
    """Uses a floating input as an index: moved by a unit of rounding, 3.0 becomes 2.99..."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(16, 4))

    def forward(self, x, where):
        return x * self.table[where.floor().long()]


_INDEXED_TASK = SimpleNamespace(get_inputs=lambda: [
    torch.randn(64, 4), torch.randint(1, 15, (64,)).float()])


def test_the_moves_are_sized_from_the_references_own_error_and_stay_that_small(monkeypatch):
    """Moved by the pilot's 2**-12, the kink task's outputs move far more than the reference's
    own error; the runs' move is scaled down to KINK_FACTOR times that error."""
    module = _kink_task()
    model = task_inputs.build_model(module.Model, module.get_init_inputs(), "cpu",
                                    torch.float32)
    sizes: list[float] = []
    moved = oracle_backward._moved

    def recorded(inputs, generator, relative):
        sizes.append(relative)
        return moved(inputs, generator, relative)

    monkeypatch.setattr(oracle_backward, "_moved", recorded)
    _backward(model, module, variants=(None,))
    assert sizes[0] == oracle_backward._PILOT
    assert len(sizes) == 1 + oracle_backward.PERTURBED_RUNS
    assert 0 < sizes[1] == sizes[2] < oracle_backward._PILOT
    values = moved([torch.full((4096,), 3.0)], torch.Generator().manual_seed(1), 1e-3)[0]
    assert (values != 3.0).all() and (values - 3.0).abs().max() <= 3e-3


def test_a_moved_run_that_changes_the_task_rather_than_its_rounding_counts_for_nothing(
        monkeypatch):
    # An index taken from a floating input, and moves as large as the pilot's 10 %: the
    # rows read change, and gradients far off would pass for the reference's own error.
    monkeypatch.setattr(oracle_backward, "_PILOT", 0.1)
    monkeypatch.setattr(oracle_backward, "KINK_FACTOR", 1e9)
    _, report = _backward(_Indexed(), _INDEXED_TASK, variants=(None, None))
    assert report["grad_float64_failed"] == (False, False, False), report
    assert max(l2 for l2 in report["grad_float64_l2"]) < 1e-5, report


class _Scale(torch.nn.Module):
    def __init__(self, refuse_float64: bool = False) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(8))
        self.refuse_float64 = refuse_float64

    def forward(self, x):
        if self.refuse_float64 and x.dtype == torch.float64:
            raise RuntimeError("\"scale_cpu\" not implemented for 'Double'")
        return x * self.scale


_SCALE_TASK = SimpleNamespace(get_inputs=lambda: [torch.randn(4, 8)])


def test_a_reference_within_the_tolerance_of_float64_has_no_allowance():
    _, report = _backward(_Scale(), _SCALE_TASK)
    assert report["grad_float64_l2"][0] == 0.0  # x times the scale: one rounding, float64's
    assert report["grad_float64_l2"][1] < 1e-6  # a sum of four products
    assert report["grad_float64_failed"] == (False, False)


def test_a_float64_run_that_fails_never_fails_the_task_and_says_why():
    bundle, report = _backward(_Scale(refuse_float64=True), _SCALE_TASK)
    assert report["grad_sets"] == (0, 1, 2) and len(bundle) == 3  # the stress set judged
    assert report["grad_float64_l2"] == (None, None)
    assert report["grad_float64_problem"] == ("its float64 run failed: RuntimeError: "
                                              "\"scale_cpu\" not implemented for 'Double'")


def test_a_float64_task_has_nothing_wider_to_be_measured_against():
    model = _Scale().double()
    _, report = _backward(model, _SCALE_TASK, dtype=torch.float64)
    assert not [key for key in report if key.startswith("grad_float64")]


# Through the real oracle, worker and judge, on the CPU

KINK_CANDIDATE = '''
import torch
import torch.nn as nn

CHUNK = 64  # the inner dimension summed in chunks: another order than the library's GEMM


class LinearReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        z = bias.expand(x.shape[0], -1).clone()
        for start in range(0, x.shape[1], CHUNK):
            z = z + x[:, start:start + CHUNK] @ weight[:, start:start + CHUNK].t()
        ctx.save_for_backward(x, weight, z)
        return z.clamp_min(0)

    @staticmethod
    def backward(ctx, grad):
        x, weight, z = ctx.saved_tensors
        masked = grad * (z > 0)
        dx = masked @ weight
        return dx, masked.t() @ x, masked.sum(0)


class ModelNew(nn.Module):
    def __init__(self, features, outputs):
        super().__init__()
        half = nn.Linear(features, outputs)
        self.weight = nn.Parameter(torch.cat([half.weight, -half.weight], dim=1).detach())
        self.bias = nn.Parameter(half.bias.detach().clone())

    def forward(self, x):
        return LinearReLU.apply(x, self.weight, self.bias)
'''


def _judged(source: str):
    # At the task's own sizes: shrunk, its 131k pre-activations would hold no flip.
    config = EvalConfig(device="cpu", static_checks=False, vary_shapes=False,
                        shrink_on_cpu=False)
    judge = Judge(load_task(str(KINK_TASK)), config)
    return judge.evaluate(Candidate(source, backend="pytorch", name="kinks"))


def test_an_honest_kernel_summing_in_another_order_passes_with_the_kink_note():
    verdict = _judged(KINK_CANDIDATE)
    assert verdict.status == "ok", f"{verdict.reason}: {verdict.message}\n{verdict.logs[-2000:]}"
    kinks = [note for note in verdict.notes if "held to the reference's own error" in note]
    assert kinks and any(note.startswith("gradient of input 0 (x)") for note in kinks), \
        verdict.notes


def test_the_same_kernel_skipping_a_tile_of_rows_is_rejected():
    line = "        dx = masked @ weight\n"
    skipped = KINK_CANDIDATE.replace(line, line + "        dx[-32:] = 0  # a tile skipped\n")
    verdict = _judged(skipped)
    assert verdict.reason == "gradient_mismatch", f"{verdict.reason}: {verdict.message}"
    assert verdict.message.startswith("gradient of input 0 (x) on input set")
    assert ("the reference's own gradient misses float64 or its runs on moved inputs too"
            in verdict.message)
