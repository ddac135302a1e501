"""The judge's decisions: from what the worker reported to a verdict reason.

Everything here runs in the judge's process, on outputs loaded as plain
tensors; nothing the candidate computed about itself is taken on trust
except the guard observations, which the harness snapshot protects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelevo.evaluate.analysis.tolerance import compare_tensor, worst_of
from kernelevo.evaluate.shared.messages import CheckedCandidate
from kernelevo.evaluate.shared.oplog import reference_reused
from kernelevo.evaluate.verdict import ErrorMetrics


@dataclass
class Decision:
    """A reason (None when everything passed), its message and the error metrics."""

    reason: str | None = None
    message: str = ""
    metrics: ErrorMetrics | None = None
    notes: list[str] = field(default_factory=list)


def guard_reason(report: CheckedCandidate) -> tuple[str, str] | None:
    """The first guard that fired in the worker's report, if any."""
    for problem in report.problems:
        reason, _, detail = problem.partition(": ")
        return reason, detail
    checks = (("tampered", "harness_tampered", "patched: "),
              ("threads", "background_thread", "threads still running: "),
              ("children", "spawned_process", "child processes: "),
              ("files", "file_io", "files written: "))
    for key, reason, prefix in checks:
        found = getattr(report, key)
        if found:
            return reason, prefix + ", ".join(str(x) for x in found[:5])
    return None


def compare_set(got: dict[str, Any], expected: list[torch.Tensor], structure: str,
                tolerances: Sequence[tuple[float, float]], label: str,
                device: str) -> tuple[str | None, str, list[ErrorMetrics]]:
    """Compare one set's outputs; (reason, message, metrics of each output)."""
    values = got["values"]
    if got["structure"] != structure and not _same_shape_of_sequence(got["structure"], structure):
        return "wrong_structure", f"{label}: returned {got['structure']}, expected {structure}", []
    metrics: list[ErrorMetrics] = []
    for position, (value, reference) in enumerate(zip(values, expected)):
        if not isinstance(value, torch.Tensor):
            return "not_a_tensor", f"{label} output {position} is {value}", metrics
        atol, rtol = tolerances[position]
        outcome = compare_tensor(value, reference, atol, rtol, f"{label} output {position}",
                                 device=device)
        if outcome.metrics is not None:
            metrics.append(outcome.metrics)
        if outcome.reason:
            return outcome.reason, outcome.message, metrics
    return None, "", metrics


def _same_shape_of_sequence(a: str, b: str) -> bool:
    """A list and a tuple of the same length are the same structure."""
    return a.split(":")[-1] == b.split(":")[-1] and "tensor" not in (a, b)


def decide_correctness(outputs: dict[str, Any], references: Sequence[list[torch.Tensor]],
                       structure: str, tolerances: Sequence[tuple[float, float]],
                       device: str, stress: Mapping[int, str] | None = None) -> Decision:
    """Every input set, then the repeated call, must match the reference.

    The task's own sets are judged before the stress sets (`stress` maps a
    set's index to how it was made), so a candidate wrong only under stress
    gets its own reason, naming the set and its value range.
    """
    stress = stress or {}
    all_metrics: list[ErrorMetrics] = []
    order = sorted(range(len(references)), key=lambda number: number in stress)
    for number in order:
        reason, message, metrics = compare_set(outputs["sets"][number], references[number],
                                               structure, tolerances, f"input set {number}",
                                               device)
        all_metrics += metrics
        if reason and number in stress and reason in STRESS_REASONS:
            return Decision("stress_inputs_failed", f"right on the task's own inputs, wrong on "
                            f"input set {number} ({stress[number]}): {message}",
                            worst_of(metrics))
        if reason:
            return Decision(reason, message, worst_of(metrics))
    reason, message, _ = compare_set(outputs["repeat"], references[0], structure, tolerances,
                                     "repeated call on input set 0", device)
    if reason:
        return Decision("stateful_forward", "a second call on the same inputs differs: " + message,
                        worst_of(all_metrics))
    return Decision(None, "", worst_of(all_metrics))


# Value errors only: a wrong shape or type on a stress set is no numeric weakness.
STRESS_REASONS = frozenset({"output_mismatch", "non_finite"})


def decide_honesty(report: CheckedCandidate, outputs: dict[str, Any],
                   reference: list[torch.Tensor],
                   structure: str, tolerances: Sequence[tuple[float, float]], backend: str,
                   policy: str, reference_ops: Set[str], device: str) -> Decision:
    """Kernels must matter, and the reference's PyTorch ops must not reappear."""
    decision = Decision()
    if backend == "pytorch":
        # Declared PyTorch (a seed or a baseline) is not a disguised reference;
        # the strict policy's static checks reject it as having no kernel.
        return decision
    if backend == "triton" and report.triton_launches == 0:
        return Decision("no_custom_kernel", "no Triton kernel was launched during forward")
    switchable = backend == "triton" or report.cuda_switchable
    if backend != "pytorch" and switchable and outputs.get("knockout") is not None:
        reason, _, _ = compare_set(outputs["knockout"], reference, structure, tolerances,
                                   "knockout", device)
        if reason is None:
            return Decision("ghost_kernel", "with the candidate's own kernels switched off the "
                            "output still matches the reference: PyTorch computes it")
    elif backend == "cuda":
        decision.notes.append("kernel knockout unavailable for this CUDA source")
    candidate_ops = set(report.ops)
    if policy == "strict" and candidate_ops:
        return Decision("library_compute", "PyTorch compute ops under the strict policy: "
                        + ", ".join(sorted(candidate_ops)))
    if policy == "default" and reference_reused(reference_ops, candidate_ops):
        return Decision("reference_ops_reused", "the candidate dispatches every compute op of "
                        "the reference: " + ", ".join(sorted(reference_ops)))
    return decision


def warm_comparisons(device: str) -> None:
    """Run the comparisons once on tiny tensors, so their kernels are loaded on `device`.

    The first comparisons of a fresh process load a few dozen kernels and make
    its CUDA context: 0.65-0.9 s of a cold `eval` on an H200 when the first
    trivial-answer check paid for them (bench/cold_timeline.py).
    """
    reference = torch.randn(2, 64, device=device)
    trivial_answers_pass([[reference], [reference * 2]], [(1e-4, 1e-4)], device)
    compare_tensor(reference * (1 + 1e-7), reference, 1e-4, 1e-4)
    torch.cuda.synchronize(device)


def trivial_answers_pass(references: Sequence[list[torch.Tensor]],
                         tolerances: Sequence[tuple[float, float]], device: str) -> list[str]:
    """Names of trivial answers (zeros, another set's output) that would pass.

    Compared a chunk at a time on `device`, wherever the references are: the
    constant answers are one value stretched over the output (no memory), so
    a full GPU does not send the check, and the decision it is part of, to
    the CPU.
    """
    passing = []
    for position, reference in enumerate(references[0]):
        if not reference.is_floating_point():
            continue
        atol, rtol = tolerances[position]
        ref = reference.reshape(-1)  # a view of a contiguous output

        def constant(value: float) -> torch.Tensor:
            return torch.full((), value, dtype=ref.dtype, device=ref.device).expand(ref.numel())

        trials = {"zeros": constant(0.0)}
        if len(references) > 1 and references[1][position].shape == reference.shape:
            trials["another input set's output"] = references[1][position].reshape(-1)
        trials["a constant"] = constant(ref.mean(dtype=torch.float64).item()) \
            if ref.numel() > 1 else trials["zeros"]
        for name, value in trials.items():
            if compare_tensor(value, ref, atol, rtol, device=device).reason is None:
                passing.append(f"output {position}: {name}")
    return passing
