"""The reference's gradients, in the oracle's process (oracle.py calls it for a backward task).

For every kept input set the task's Model runs forward with grad on fresh
copies of the inputs, then backward of the projected loss (gradients.py).
Each set's backward runs once more in float64 (a copy of the model, the
inputs widened), and the reference's gradients are measured against it. On a
stress set they must be sure, as its outputs must: where they differ from the
float64 gradients by more than a quarter of the tolerance, that set's
gradients are not judged. Over the judged sets, the reference's own error on
each gradient (its largest relative L2 error and share of elements outside
the tolerance, and whether it failed the elementwise test itself) goes to
the judge: decide_backward.py holds a candidate to it where the reference
itself is not exact (a ReLU kink, a cancellation). A float64 run that fails
(no float64 kernels, out of memory, a model that does not copy) never fails
the task: the error is then not measured, and the report says why.

Each set's backward also runs PERTURBED_RUNS more times in the task's own
precision on its floating inputs moved at random, by a relative amount
chosen so that the forward's outputs move KINK_FACTOR times as far as the
reference's own outputs are from float64's (a forward with a pilot amount
first; the response is linear at this scale), and those gradients are
measured against the reference's as well: each lands as far from the
reference as a kernel KINK_FACTOR times less exact than it may. Where a
pre-activation lies within rounding of a ReLU's kink, whether the
reference's one float64 comparison shows the flip is chance (on KernelBench
level-2 task 76 well under one flip a set; a kernel summing in another order
flips others; bench/kink_rate.py): with these runs, a reference that is that sensitive shows it
on most evaluations, not only on those where its own rounding happened to
flip one. A perturbed run more than KINK_LIMIT off in relative L2 is not
rounding (an input used as an index, say) and counts for nothing; one that
fails counts for nothing either.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelevo.config import EvalConfig, tolerances
from kernelevo.evaluate.analysis.decide_backward import KINK_FACTOR, KINK_LIMIT
from kernelevo.evaluate.analysis.tolerance import compare_tensor
from kernelevo.evaluate.child.task_code import Step, TaskProblem, task_code
from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.gradients import Backward, NotDifferentiable, forward_backward

BACKWARD = Step("the task's Model under autograd (forward with grad, then backward)",
                "the task asks for its backward (backward = True): Model.forward must be "
                "differentiable")
_SURE_SHARE = 0.25  # of the tolerance: the most a stress set's reference gradient may be off by
_PROBLEM_CHARS = 200  # of a float64 run's error, in the report
# Runs a set of the reference on its inputs moved as far as its own error allows (module docstring).
PERTURBED_RUNS = 2
_PERTURB_SALT = 0x5EED_0F_0DD
_PILOT = 2.0 ** -12  # the pilot's relative move of each input element, and the most used
_CHUNK = 1 << 22  # elements of a relative error summed at once (float64 copies: 64 MB)

# One gradient's error against float64 on one set: (relative L2 error, share of
# elements outside the tolerance, failed the elementwise test).
Measured = tuple[float, float, bool]


@dataclass
class Float64Check:
    """One set's reference gradients against the same model's float64 gradients (or against
    its own on moved inputs: perturbed_checks)."""

    sure: bool = True  # within a quarter of the tolerance (a model without float64: taken so)
    # Per gradient at the full tolerance (None where not comparable); None: not measured.
    measured: list[Measured | None] | None = None
    problem: str = ""  # why the float64 run failed, where it did
    # The forward's outputs' largest relative L2 error against float64's (None: not measured).
    forward_error: float | None = None


@dataclass
class OwnErrors:
    """The reference's own gradient errors against float64, over the judged sets."""

    count: int  # gradients
    problem: str = ""  # why they were not measured, where a float64 run failed
    largest: list[Measured | None] = field(default_factory=list)

    def add(self, check: Float64Check) -> None:
        """One judged set's check: the largest errors kept, or the first problem."""
        if check.measured is None:
            self.problem = self.problem or check.problem
        elif not self.largest:
            self.largest = list(check.measured)
        else:
            self.largest = [None if a is None or b is None
                            else (max(a[0], b[0]), max(a[1], b[1]), a[2] or b[2])
                            for a, b in zip(self.largest, check.measured)]

    def report(self) -> dict[str, Any]:
        """The oracle's report fields (messages.OracleDone's grad_float64_*)."""
        if self.problem or not self.largest:
            return {"grad_float64_l2": (None,) * self.count,
                    "grad_float64_mismatch": (None,) * self.count,
                    "grad_float64_failed": (False,) * self.count,
                    "grad_float64_problem": self.problem or "no input set was judged"}
        largest = self.largest
        return {"grad_float64_l2": tuple(None if m is None else m[0] for m in largest),
                "grad_float64_mismatch": tuple(None if m is None else m[1] for m in largest),
                "grad_float64_failed": tuple(m is not None and m[2] for m in largest)}


def reference_backward(model: Any, module: Any, seeds: list[int],
                       variants: list[float | None], device: str, dtype: torch.dtype,
                       run: EvalConfig) -> tuple[dict[str, list[torch.Tensor]], dict[str, Any]]:
    """Bundle entries `grad_<set>` of the kept sets, and the oracle's report fields on them.

    `seeds` and `variants` are those of the kept sets, in order. The first
    set's backward runs under the operator log: the reference's backward ops.
    `run` holds the run's --atol/--rtol, which the float64 checks obey as the
    judge's gradient checks do.
    """
    # The task's gradient tolerances, else its output tolerances (else the dtype's).
    atol = _float_attr(module, "grad_atol") or _float_attr(module, "output_atol")
    rtol = _float_attr(module, "grad_rtol") or _float_attr(module, "output_rtol")
    bundle: dict[str, list[torch.Tensor]] = {}
    judged: list[int] = []
    first: Backward | None = None
    own: OwnErrors | None = None
    for number, (seed, variant) in enumerate(zip(seeds, variants)):
        result = _run(model, module, seed, device, dtype, variant, record=number == 0)
        first = first or result
        own = own or OwnErrors(len(result.gradients))
        check = float64_check(model, module, seed, device, dtype, variant, result, atol, rtol,
                              run)
        if variant is not None and not check.sure:
            continue
        bundle[f"grad_{number}"] = result.gradients
        judged.append(number)
        own.add(check)
        for moved in perturbed_checks(model, module, seed, device, dtype, variant, result,
                                      check.forward_error, atol, rtol, run):
            own.add(moved)
    assert first is not None and own is not None
    if not first.names:
        raise TaskProblem("the task asks for its backward (backward = True), but it has no "
                          "floating input and no parameter to take a gradient of")
    return bundle, {
        "grad_names": tuple(first.names),
        "grad_dtypes": tuple(str(g.dtype).replace("torch.", "") for g in first.gradients),
        "grad_sets": tuple(judged), "grad_atol": atol, "grad_rtol": rtol,
        "backward_ops": first.ops,
        # a float64 task's reference is as exact as the check could make it
        **(own.report() if dtype != torch.float64 else {})}


def _run(model: Any, module: Any, seed: int, device: str, dtype: torch.dtype,
         variant: float | None, record: bool = False) -> Backward:
    inputs = task_inputs.kept_inputs(module, seed, device, dtype, variant)
    try:
        with task_code(BACKWARD, keep=(NotDifferentiable,)):
            return forward_backward(model, inputs, seed, record=record)
    except NotDifferentiable as exc:
        raise TaskProblem(f"the task asks for its backward (backward = True), but its "
                          f"reference is not differentiable: {exc}") from None


def float64_check(model: Any, module: Any, seed: int, device: str, dtype: torch.dtype,
                  scale: float | None, result: Backward, task_atol: float | None,
                  task_rtol: float | None, run: EvalConfig) -> Float64Check:
    """The reference's gradients on one set against the same model's in float64: one
    float64 backward, whose failure is reported, never raised."""
    if dtype == torch.float64:
        return Float64Check()
    try:
        wide = copy.deepcopy(model).double()
        inputs = [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                  for v in task_inputs.kept_inputs(module, seed, device, dtype, scale)]
        wide_run = forward_backward(wide, inputs, seed)
        exact = wide_run.gradients
        forward_error = output_error(result.outputs, wide_run.outputs)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return Float64Check(problem="its float64 run ran out of memory")
    except Exception as exc:  # noqa: BLE001 - ops without float64 kernels, models that do not copy
        said = f"{type(exc).__name__}: {exc}".splitlines()[0][:_PROBLEM_CHARS]
        return Float64Check(problem=f"its float64 run failed: {said}")
    measured, sure = [], True
    for ours, wide_value in zip(result.gradients, exact):
        atol, rtol = tolerances(str(ours.dtype).replace("torch.", ""), task_atol, task_rtol, run)
        wide_value = wide_value.to(ours.dtype)
        measured.append(_measured(ours, wide_value, atol, rtol))
        sure = sure and compare_tensor(ours, wide_value, atol * _SURE_SHARE,
                                       rtol * _SURE_SHARE).reason is None
    return Float64Check(sure, measured, forward_error=forward_error)


def perturbed_checks(model: Any, module: Any, seed: int, device: str, dtype: torch.dtype,
                     scale: float | None, result: Backward, forward_error: float | None,
                     task_atol: float | None, task_rtol: float | None,
                     run: EvalConfig) -> list[Float64Check]:
    """The reference's gradients on one set against its own on the same inputs moved at
    random, PERTURBED_RUNS times, each move sized so that the outputs move KINK_FACTOR times
    `forward_error` (the reference's own, against float64): how far a kernel that much less
    exact may land. Never raises; a run that fails ends them, and a run more than KINK_LIMIT
    off in relative L2 is not rounding (an input used as an index) and is left out."""
    if dtype == torch.float64 or not forward_error:
        return []
    checks: list[Float64Check] = []
    try:
        inputs = task_inputs.kept_inputs(module, seed, device, dtype, scale)
        generator = _generator(inputs, seed)
        if generator is None:
            return []
        with torch.no_grad():  # the pilot: how far the outputs move for a move of _PILOT
            outputs, _ = task_inputs.flatten_outputs(model(*_moved(inputs, generator, _PILOT)))
        response = output_error(outputs, result.outputs)
        if not response:
            return []
        relative = min(_PILOT * KINK_FACTOR * forward_error / response, _PILOT)
        for _ in range(PERTURBED_RUNS):
            moved = forward_backward(model, _moved(inputs, generator, relative), seed).gradients
            measured = []
            for ours, other in zip(result.gradients, moved):
                atol, rtol = tolerances(str(ours.dtype).replace("torch.", ""), task_atol,
                                        task_rtol, run)
                measured.append(_measured(ours, other, atol, rtol))
            if all(m is None or m[0] <= KINK_LIMIT for m in measured):
                checks.append(Float64Check(True, measured))
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - a model that cannot take the moved inputs: not measured
        pass
    return checks


def _generator(inputs: list[Any], seed: int) -> torch.Generator | None:
    """The moves' generator, on the first floating input's device; None without one."""
    first = next((v for v in inputs if isinstance(v, torch.Tensor) and v.is_floating_point()),
                 None)
    if first is None:
        return None
    generator = torch.Generator(device=first.device)
    generator.manual_seed((seed ^ _PERTURB_SALT) & (2 ** 62 - 1))
    return generator


def _moved(inputs: list[Any], generator: torch.Generator, relative: float) -> list[Any]:
    """The inputs, each floating element moved by up to `relative` of itself, at random."""
    moved = []
    for value in inputs:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            noise = torch.rand(value.shape, generator=generator, device=value.device,
                               dtype=value.dtype)
            value = value + noise.mul_(2).sub_(1).mul_(relative).mul_(value)
        moved.append(value)
    return moved


def output_error(outputs: list[Any], reference: list[Any]) -> float | None:
    """The largest relative L2 error of the floating outputs against `reference`'s, summed in
    float64 a chunk at a time; None where none compares (or any is not finite)."""
    worst: float | None = None
    for ours, theirs in zip(outputs, reference):
        if not (isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor)
                and ours.is_floating_point() and ours.shape == theirs.shape):
            continue
        a, b = ours.detach().reshape(-1), theirs.detach().reshape(-1)
        # Summed on the device in the chunks' order and read back once (not twice a chunk).
        sums = torch.zeros(2, dtype=torch.float64, device=b.device)
        for start in range(0, a.numel(), _CHUNK):
            wide = b[start:start + _CHUNK].double()
            sums += torch.stack([(a[start:start + _CHUNK].double() - wide).square().sum(),
                                 wide.square().sum()])
        difference, size = sums.tolist()
        if not (math.isfinite(difference) and math.isfinite(size)):
            return None
        error = math.sqrt(difference / size) if size > 0 else (0.0 if difference == 0 else None)
        if error is None:
            return None
        worst = error if worst is None else max(worst, error)
    return worst


def _measured(ours: torch.Tensor, wide: torch.Tensor, atol: float, rtol: float
              ) -> Measured | None:
    """One gradient's error against float64; None where there is no finite measure of it."""
    if not ours.is_floating_point():
        return None
    compared = compare_tensor(ours, wide, atol, rtol)
    metrics = compared.metrics
    if metrics is None or not math.isfinite(metrics.rel_l2_error):
        return None
    return metrics.rel_l2_error, metrics.mismatch_fraction, compared.reason is not None


def _float_attr(module: Any, name: str) -> float | None:
    value = getattr(module, name, None)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
