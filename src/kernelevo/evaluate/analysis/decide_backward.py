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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from kernelevo.config import EvalConfig, tolerances
from kernelevo.evaluate.analysis.decide import Decision
from kernelevo.evaluate.analysis.reference import ReferenceGradients, ReferenceResult, Tolerance
from kernelevo.evaluate.analysis.tolerance import compare_tensor, worst_of
from kernelevo.evaluate.shared.gradients import KNOCKOUT_SET, REPEAT_SCALE, gradient_key
from kernelevo.evaluate.shared.messages import CheckedCandidate, OracleDone
from kernelevo.evaluate.shared.oplog import reference_reused
from kernelevo.evaluate.verdict import ErrorMetrics


def reference_gradients(final: OracleDone, bundle: dict[str, list[Any]],
                        config: EvalConfig) -> ReferenceGradients:
    """What the judge keeps of the reference's backward, beside its outputs."""
    return ReferenceGradients(
        by_set={number: bundle[f"grad_{number}"] for number in final.grad_sets},
        names=tuple(final.grad_names),
        tolerances=tuple(tolerances(name, final.grad_atol, final.grad_rtol, config)
                         for name in final.grad_dtypes),
        ops=frozenset(final.backward_ops))


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
            outcome = compare_tensor(value.to(device), want.to(device), atol, rtol, label)
            if outcome.reason:
                return Decision(outcome.reason, outcome.message, outcome.metrics)
    return Decision()


def _decide_values(gradients: dict[str, list[Any]], backward: ReferenceGradients,
                   stress: Mapping[int, str], order: list[int], device: str) -> Decision:
    """Every judged set's gradients, the task's own sets first; then the repeated call."""
    names, tolerance = backward.names, backward.tolerances
    metrics: list[ErrorMetrics] = []
    for number in sorted(backward.by_set, key=lambda n: (n in stress, n)):
        reason, message = _compare(gradients[f"grad_{number}"], backward.by_set[number],
                                   order, names, tolerance, f"on input set {number}", device,
                                   metrics)
        if reason and number in stress:
            return Decision("stress_inputs_failed", f"right on the task's own inputs, wrong on "
                            f"input set {number} ({stress[number]}): {message}",
                            worst_of(metrics))
        if reason:
            return Decision("gradient_mismatch", message, worst_of(metrics))
    first = min(backward.by_set, default=None)
    if first == 0:
        expected = [g * REPEAT_SCALE for g in backward.by_set[0]]
        reason, message = _compare(gradients["grad_repeat"], expected, order, names, tolerance,
                                   "on a repeated call on input set 0 with another "
                                   "projection", device, [])
        if reason:
            return Decision("cached_gradients", "a second call on the same inputs, with the "
                            "loss's projection changed, gives gradients that do not follow "
                            f"it: {message}", worst_of(metrics))
    decision = Decision(None, "", worst_of(metrics))
    decision.notes.append(_checked_note(backward, metrics))
    if device.startswith("cuda"):
        decision.notes.append("the backward is checked, not timed: timings are of the forward "
                              "alone")
    return decision


def _compare(got: list[Any], expected: list[torch.Tensor], order: list[int],
             names: Sequence[str], tolerance: Sequence[Tolerance], where: str, device: str,
             metrics: list[ErrorMetrics]) -> tuple[str | None, str]:
    for position, reference in enumerate(expected):
        value = got[order[position]] if order[position] < len(got) else None
        label = f"gradient of {names[position]} {where}"
        if not isinstance(value, torch.Tensor):
            return "gradient_mismatch", f"{label} is {value!r:.60}, not a tensor"
        atol, rtol = tolerance[position]
        outcome = compare_tensor(value.to(device), reference.to(device), atol, rtol, label)
        if outcome.metrics is not None:
            metrics.append(outcome.metrics)
        if outcome.reason:
            return outcome.reason, outcome.message
    return None, ""


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
    names, tolerance = backward.names, backward.tolerances
    unchanged = [names[position] for position, value in enumerate(expected)
                 if _compare(knocked, [value], [order[position]], [names[position]],
                             [tolerance[position]], "", device, [])[0] is None]
    if len(unchanged) == len(expected):
        return Decision("ghost_backward", "with the candidate's own kernels switched off "
                        "during backward the gradients still match the reference's: PyTorch "
                        "computes them")
    if unchanged:
        return Decision(notes=["with the candidate's kernels off during backward, the "
                               f"gradient of {', '.join(unchanged)} still matched: PyTorch "
                               "computes it"])
    return Decision()
