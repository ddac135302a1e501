"""The judge's decisions on a candidate's gradients, for a task whose backward is judged.

Runs in the judge's process after the forward passed (outcome.py). The
gradients must match the reference's on every input set the oracle judged
(the task's own sets first, then the stress set), and again on a repeated
call whose projection was scaled; then the backward must be the candidate's
own: its outputs' autograd graph must reach a custom autograd.Function, its
forward under grad (as training calls it) must give the forward's outputs
without the reference's ops, its backward must launch its own kernels and
must not dispatch the reference's backward ops, and with its kernels switched
off the gradients must change.

The kink rule. Where a gradient fails the elementwise test, it still passes
when the reference is no nearer exact arithmetic than the candidate is to
the reference: the reference's own gradient failed the same test against the
same model's float64 gradient, or against its own runs on inputs moved as
far as its own error allows, on some judged set (oracle_backward.py
measures both), the candidate's relative L2 error is at most KINK_FACTOR
times the reference's own, and its share of elements outside the tolerance at most
KINK_FACTOR squared times the reference's. A kernel is held to the fp32
reference's own error, as FlashAttention's tests hold theirs. Why: ReLU's
derivative at a pre-activation within rounding of zero. On KernelBench
level-2 task 76 (x[897, 7169] @ W^T + bias, then ReLU) an honest Triton
forward and backward in fp32 sums in another order than cuBLAS; about 5 of
6.4M pre-activations land on the other side of zero, each moves a whole row
of dx by g_ij * W_j, and dx was off by up to 0.0102 at 0.42 % of its
elements. Both masks are right, and the reference's fp32 gradient misses
float64 in the same way. Skipped work still fails: a skipped row or tile is
far more L2 error than a few flipped rows, lower precision (TF32) puts
nearly every element outside the tolerance, and no gradient more than
KINK_LIMIT off in relative L2 passes this way. Where the reference is exact
against float64, or its error was not measured, the elementwise test alone
decides; NaN or Inf, shapes and dtypes fail as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelevo.config import EvalConfig, tolerances
from kernelevo.evaluate.analysis.decide import Decision
from kernelevo.evaluate.analysis.reference import (OwnError, ReferenceGradients,
                                                   ReferenceResult)
from kernelevo.evaluate.analysis.tolerance import compare_tensor, worst_of
from kernelevo.evaluate.shared.gradients import KNOCKOUT_SET, REPEAT_SCALE, gradient_key
from kernelevo.evaluate.shared.messages import CheckedCandidate, OracleDone
from kernelevo.evaluate.shared.oplog import reference_reused
from kernelevo.evaluate.verdict import ErrorMetrics


# The kink rule (module docstring): how far past the reference's own error against
# float64 a gradient may be in relative L2 (its share of elements outside the
# tolerance may be this squared times the reference's: both grow with the flipped
# rows, the share as the L2 error squared), and the most it may be off this way.
KINK_FACTOR = 3.0
KINK_LIMIT = 0.1


def reference_gradients(final: OracleDone, bundle: dict[str, list[Any]],
                        config: EvalConfig) -> ReferenceGradients:
    """What the judge keeps of the reference's backward, beside its outputs."""
    own = tuple(None if l2 is None or share is None else OwnError(l2, share, failed)
                for l2, share, failed in zip(final.grad_float64_l2, final.grad_float64_mismatch,
                                             final.grad_float64_failed))
    return ReferenceGradients(
        by_set={number: bundle[f"grad_{number}"] for number in final.grad_sets},
        names=tuple(final.grad_names),
        tolerances=tuple(tolerances(name, final.grad_atol, final.grad_rtol, config)
                         for name in final.grad_dtypes),
        ops=frozenset(final.backward_ops), own_errors=own,
        own_unmeasured=final.grad_float64_problem)


def decide_backward(report: CheckedCandidate, gradients: dict[str, list[Any]],
                    reference: ReferenceResult, backward: ReferenceGradients, backend: str,
                    policy: str, device: str) -> Decision:
    """The candidate's gradients right, then its own: a Decision (reason None: passed)."""
    if report.backward_problem:
        return Decision("not_differentiable", report.backward_problem)
    if report.backward_error:
        return Decision("backward_failed", report.backward_error)
    wanted = ([f"grad_{n}" for n in backward.by_set] + ["grad_repeat"]
              + [f"grad_out_{n}" for n in range(len(reference.outputs))])
    missing = [name for name in wanted if name not in gradients]
    if missing:
        return Decision("backward_failed", f"the worker sent no gradients for {missing[0]}")
    outputs = _decide_outputs(gradients, reference, device)
    if outputs.reason:
        return outputs
    order = _matched(backward.names, list(report.grad_names), backward.by_set, gradients)
    if isinstance(order, str):
        return Decision("gradient_mismatch", order)
    decision = _decide_values(gradients, backward, reference.stress, order, device)
    if decision.reason or backend == "pytorch":
        return decision
    honesty = _decide_own(report, gradients, reference.ops, backward, order, policy, backend,
                          device)
    if honesty.reason:
        return Decision(honesty.reason, honesty.message, decision.metrics)
    decision.notes += honesty.notes
    return decision


def _matched(names: Sequence[str], theirs: list[str],
             reference: Mapping[int, list[torch.Tensor]],
             gradients: dict[str, list[Any]]) -> list[int] | str:
    """For each reference gradient, the index of the candidate's; or why they do not pair.

    Inputs pair by position. Parameters pair by name where the candidate's
    names are the reference's, else in order where their number and shapes
    agree (a candidate may name its parameters its own way).
    """
    keys, their_keys = [gradient_key(n) for n in names], [gradient_key(n) for n in theirs]
    if sorted(keys) == sorted(their_keys):
        return [their_keys.index(key) for key in keys]
    first = next(iter(reference.values()), [])
    own = next((gradients[k] for k in sorted(gradients) if k.startswith("grad_")
                and k[5:].isdigit()), [])
    shapes = [tuple(getattr(g, "shape", ())) for g in first]
    their_shapes = [tuple(getattr(g, "shape", ())) for g in own]
    if len(theirs) == len(names) and shapes == their_shapes \
            and [k for k in keys if k.startswith("input")] \
            == [k for k in their_keys if k.startswith("input")]:
        return list(range(len(names)))
    return (f"the candidate's gradients are of {_listed(theirs, their_shapes)}, the "
            f"reference's of {_listed(names, shapes)}: ModelNew must take the reference's "
            "inputs and hold its parameters (the same shapes, in the same order)")


def _listed(names: Sequence[str], shapes: list[tuple[int, ...]], shown: int = 8) -> str:
    """Gradients with their shapes, for a message: `parameter weight [8], ...`."""
    parts = [f"{name} {list(shape)}" for name, shape in zip(names, shapes)]
    if not parts:
        return "nothing"
    more = f" and {len(parts) - shown} more" if len(parts) > shown else ""
    return ", ".join(parts[:shown]) + more


def _decide_outputs(gradients: dict[str, list[Any]], reference: ReferenceResult,
                    device: str) -> Decision:
    """The outputs of forward under grad, which training computes with, as the forward's."""
    for number, expected in enumerate(reference.outputs):
        got = gradients[f"grad_out_{number}"]
        if len(got) != len(expected):
            return Decision("wrong_structure", f"forward under autograd returned {len(got)} "
                            f"output(s) on input set {number}, without it {len(expected)}")
        for position, (value, want) in enumerate(zip(got, expected)):
            label = f"forward under autograd (as training calls it), input set {number} " \
                    f"output {position}"
            if not isinstance(value, torch.Tensor):
                return Decision("not_a_tensor", f"{label} is {value}")
            atol, rtol = reference.tolerances[position]
            outcome = compare_tensor(value, want, atol, rtol, label, device=device)
            if outcome.reason:
                return Decision(outcome.reason, outcome.message, outcome.metrics)
    return Decision()


def _decide_values(gradients: dict[str, list[Any]], backward: ReferenceGradients,
                   stress: Mapping[int, str], order: list[int], device: str) -> Decision:
    """Every judged set's gradients, the task's own sets first; then the repeated call."""
    check = _Check(backward, order, device)
    for number in sorted(backward.by_set, key=lambda n: (n in stress, n)):
        reason, message = check.all(gradients[f"grad_{number}"], backward.by_set[number],
                                    f"on input set {number}")
        if reason and number in stress:
            return Decision("stress_inputs_failed", f"right on the task's own inputs, wrong on "
                            f"input set {number} ({stress[number]}): {message}",
                            worst_of(check.metrics))
        if reason:
            return Decision("gradient_mismatch", message, worst_of(check.metrics))
    first = min(backward.by_set, default=None)
    if first == 0:
        expected = [g * REPEAT_SCALE for g in backward.by_set[0]]
        repeat = _Check(backward, order, device, kinks=check.kinks)  # its errors not worst
        reason, message = repeat.all(gradients["grad_repeat"], expected, "on a repeated call on "
                                     "input set 0 with another projection")
        if reason:
            return Decision("cached_gradients", "a second call on the same inputs, with the "
                            "loss's projection changed, gives gradients that do not follow "
                            f"it: {message}", worst_of(check.metrics))
    decision = Decision(None, "", worst_of(check.metrics))
    decision.notes.append(_checked_note(backward, check.metrics))
    decision.notes += check.kink_notes()
    if backward.own_unmeasured:
        decision.notes.append("the reference's own gradient error against float64 was not "
                              f"measured ({backward.own_unmeasured}): the gradients were held "
                              "to the elementwise test alone")
    if device.startswith("cuda"):
        decision.notes.append("the backward is checked, not timed: timings are of the forward "
                              "alone")
    return decision


@dataclass
class _Check:
    """A candidate's gradients against the reference's, one at a time; what it saw is kept."""

    backward: ReferenceGradients
    order: list[int]  # for each reference gradient, the index of the candidate's
    device: str
    metrics: list[ErrorMetrics] = field(default_factory=list)
    # A gradient's position -> where and how it passed by the kink rule (its worst)
    kinks: dict[int, tuple[str, ErrorMetrics]] = field(default_factory=dict)

    def all(self, got: list[Any], expected: list[torch.Tensor],
            where: str) -> tuple[str | None, str]:
        """The first failing gradient's (reason, message), or (None, "")."""
        for position, reference in enumerate(expected):
            reason, message = self.one(got, position, reference, where)
            if reason:
                return reason, message
        return None, ""

    def one(self, got: list[Any], position: int, reference: torch.Tensor,
            where: str) -> tuple[str | None, str]:
        """The gradient at `position` against `reference`: (reason, message), or (None, "")."""
        index = self.order[position]
        value = got[index] if index < len(got) else None
        label = f"gradient of {self.backward.names[position]} {where}"
        if not isinstance(value, torch.Tensor):
            return "gradient_mismatch", f"{label} is {value!r:.60}, not a tensor"
        atol, rtol = self.backward.tolerances[position]
        outcome = compare_tensor(value, reference, atol, rtol, label, device=self.device)
        if outcome.metrics is not None:
            self.metrics.append(outcome.metrics)
        own = self.backward.own_error(position)
        if outcome.reason == "output_mismatch" and outcome.metrics is not None \
                and own is not None and within_own_error(outcome.metrics, own):
            kept = self.kinks.get(position)
            if kept is None or outcome.metrics.rel_l2_error > kept[1].rel_l2_error:
                self.kinks[position] = (where, outcome.metrics)
            return None, ""
        if outcome.reason == "output_mismatch" and own is not None:
            return outcome.reason, outcome.message + _own_said(own)
        return outcome.reason, outcome.message

    def kink_notes(self) -> list[str]:
        """One note per gradient that passed by the kink rule, on its worst set."""
        notes = []
        for position, (where, metrics) in sorted(self.kinks.items()):
            own = self.backward.own_error(position)
            assert own is not None
            notes.append(f"gradient of {self.backward.names[position]} held to the reference's "
                         f"own error, not elementwise: {where}, {metrics.mismatch_fraction:.2%} "
                         f"of its elements outside the tolerance, relative L2 error "
                         f"{metrics.rel_l2_error:.3g} against the reference's own "
                         f"{own.rel_l2_error:.3g} from its float64 gradient and its runs on "
                         f"moved inputs (up to {KINK_FACTOR:g}x passes): the reference is not "
                         "exact there either (a kink such as ReLU's at 0, or a cancellation)")
        return notes


def within_own_error(metrics: ErrorMetrics, own: OwnError) -> bool:
    """Whether a gradient that fails the elementwise test passes by the kink rule."""
    if not own.inexact:
        return False
    return (metrics.rel_l2_error <= min(KINK_FACTOR * own.rel_l2_error, KINK_LIMIT)
            and metrics.mismatch_fraction <= KINK_FACTOR ** 2 * own.mismatch_fraction)


def _own_said(own: OwnError) -> str:
    """What a failing gradient's message adds: the reference's own error, and what it allows."""
    if not own.inexact:
        return (f"; the reference's own gradient passes the same test against float64 and its "
                f"runs on moved inputs (relative L2 error {own.rel_l2_error:.3g}), so nothing "
                "beyond the tolerance is allowed")
    return (f"; the reference's own gradient misses float64 or its runs on moved inputs too "
            f"(relative L2 error {own.rel_l2_error:.3g}, {own.mismatch_fraction:.2%} of "
            f"elements outside the "
            f"tolerance), so a relative L2 error up to "
            f"{min(KINK_FACTOR * own.rel_l2_error, KINK_LIMIT):.3g} with up to "
            f"{min(KINK_FACTOR ** 2 * own.mismatch_fraction, 1.0):.2%} of elements outside "
            "would have passed")


def _checked_note(backward: ReferenceGradients, metrics: list[ErrorMetrics]) -> str:
    """What the gradient check covered, at which tolerances, and its worst error."""
    tolerances_said = sorted({f"atol {a:g}, rtol {r:g}" for a, r in backward.tolerances})
    worst = worst_of(metrics)
    error = (f"; worst max abs error {max(m.max_abs_error for m in metrics):.3g}, "
             f"relative L2 error {worst.rel_l2_error:.3g}" if worst is not None else "")
    return (f"gradients checked: {', '.join(backward.names)} on {len(backward.by_set)} input "
            f"set(s) and a repeated call ({'; '.join(tolerances_said)}){error}")


def _decide_own(report: CheckedCandidate, gradients: dict[str, list[Any]],
                forward_ops: frozenset[str], backward: ReferenceGradients, order: list[int],
                policy: str, backend: str, device: str) -> Decision:
    """The backward must be the candidate's own kernels, not PyTorch's autograd."""
    if not report.custom_functions:
        return Decision("reference_autograd", "the output's autograd graph reaches no custom "
                        "torch.autograd.Function (grad_fn: " + ", ".join(report.grad_fns)
                        + "): PyTorch's autograd of the ops it called computes the gradients; "
                        "wrap your kernels in an autograd.Function whose backward launches "
                        "your own kernels")
    under_grad = set(report.grad_forward_ops)
    if policy == "strict" and under_grad:
        return Decision("library_compute", "PyTorch compute ops in forward under autograd (as "
                        "training calls it) under the strict policy: "
                        + ", ".join(sorted(under_grad)))
    if policy == "default" and reference_reused(forward_ops, under_grad):
        return Decision("reference_ops_reused", "forward under autograd (as training calls it) "
                        "dispatches every compute op of the reference: "
                        + ", ".join(sorted(forward_ops)))
    ops = set(report.backward_ops)
    if policy == "strict" and ops:
        return Decision("library_compute", "PyTorch compute ops during backward under the "
                        "strict policy: " + ", ".join(sorted(ops)))
    if policy == "default" and reference_reused(backward.ops, ops):
        return Decision("reference_autograd", "the backward dispatches every compute op of the "
                        "reference's backward: " + ", ".join(sorted(backward.ops)))
    if backend == "triton" and report.backward_launches == 0:
        return Decision("ghost_backward", "no Triton kernel was launched during backward "
                        f"(custom Function: {', '.join(report.custom_functions)})")
    return _knockout(report, gradients, backward, order, backend, device)


def _knockout(report: CheckedCandidate, gradients: dict[str, list[Any]],
              backward: ReferenceGradients, order: list[int], backend: str,
              device: str) -> Decision:
    """With the kernels off during backward, the gradients must change (all: a ghost)."""
    knocked = gradients.get("grad_knockout")
    if backend == "cuda" and not report.cuda_switchable:
        return Decision(notes=["backward knockout unavailable for this CUDA source"])
    expected = backward.by_set.get(KNOCKOUT_SET)
    if expected is None:  # a stress set whose reference gradients were unsure
        return Decision(notes=[f"backward knockout not checked: input set {KNOCKOUT_SET}'s "
                               "gradients were not judged"])
    if knocked is None:  # it failed without its kernels: they matter
        return Decision()
    check = _Check(backward, order, device)
    unchanged = [backward.names[position] for position, value in enumerate(expected)
                 if check.one(knocked, position, value, "")[0] is None]
    if len(unchanged) == len(expected):
        return Decision("ghost_backward", "with the candidate's own kernels switched off "
                        "during backward the gradients still match the reference's: PyTorch "
                        "computes them")
    if unchanged:
        return Decision(notes=["with the candidate's kernels off during backward, the "
                               f"gradient of {', '.join(unchanged)} still matched: PyTorch "
                               "computes it"])
    return Decision()
