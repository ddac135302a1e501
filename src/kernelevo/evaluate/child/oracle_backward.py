"""The reference's gradients, in the oracle's process (oracle.py calls it for a backward task).

For every kept input set the task's Model runs forward with grad on fresh
copies of the inputs, then backward of the projected loss (gradients.py).
On a stress set the reference's own gradients must be sure, as its outputs
must: where they differ from the same model's float64 gradients by more than
a quarter of the tolerance, that set's gradients are not judged.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from kernelevo.config import EvalConfig, tolerances
from kernelevo.evaluate.analysis.tolerance import compare_tensor
from kernelevo.evaluate.child.task_code import Step, TaskProblem, task_code
from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.gradients import Backward, NotDifferentiable, forward_backward

BACKWARD = Step("the task's Model under autograd (forward with grad, then backward)",
                "the task asks for its backward (backward = True): Model.forward must be "
                "differentiable")
_SURE_SHARE = 0.25  # of the tolerance: the most a stress set's reference gradient may be off by


def reference_backward(model: Any, module: Any, seeds: list[int],
                       variants: list[float | None], device: str, dtype: torch.dtype,
                       run: EvalConfig) -> tuple[dict[str, list[torch.Tensor]], dict[str, Any]]:
    """Bundle entries `grad_<set>` of the kept sets, and the oracle's report fields on them.

    `seeds` and `variants` are those of the kept sets, in order. The first
    set's backward runs under the operator log: the reference's backward ops.
    `run` holds the run's --atol/--rtol, which the stress sets' check obeys
    as the judge's gradient checks do.
    """
    # The task's gradient tolerances, else its output tolerances (else the dtype's).
    atol = _float_attr(module, "grad_atol") or _float_attr(module, "output_atol")
    rtol = _float_attr(module, "grad_rtol") or _float_attr(module, "output_rtol")
    bundle: dict[str, list[torch.Tensor]] = {}
    judged: list[int] = []
    first: Backward | None = None
    for number, (seed, variant) in enumerate(zip(seeds, variants)):
        result = _run(model, module, seed, device, dtype, variant, record=number == 0)
        first = first or result
        if variant is not None and not _sure(model, module, seed, device, dtype, variant,
                                             result, atol, rtol, run):
            continue
        bundle[f"grad_{number}"] = result.gradients
        judged.append(number)
    assert first is not None
    if not first.names:
        raise TaskProblem("the task asks for its backward (backward = True), but it has no "
                          "floating input and no parameter to take a gradient of")
    return bundle, {
        "grad_names": tuple(first.names),
        "grad_dtypes": tuple(str(g.dtype).replace("torch.", "") for g in first.gradients),
        "grad_sets": tuple(judged), "grad_atol": atol, "grad_rtol": rtol,
        "backward_ops": first.ops}


def _run(model: Any, module: Any, seed: int, device: str, dtype: torch.dtype,
         variant: float | None, record: bool = False) -> Backward:
    inputs = task_inputs.kept_inputs(module, seed, device, dtype, variant)
    try:
        with task_code(BACKWARD, keep=(NotDifferentiable,)):
            return forward_backward(model, inputs, seed, record=record)
    except NotDifferentiable as exc:
        raise TaskProblem(f"the task asks for its backward (backward = True), but its "
                          f"reference is not differentiable: {exc}") from None


def _sure(model: Any, module: Any, seed: int, device: str, dtype: torch.dtype, scale: float,
          result: Backward, task_atol: float | None, task_rtol: float | None,
          run: EvalConfig) -> bool:
    """Whether the reference's gradients at a stress scale match its float64 ones within a
    quarter of the tolerance (a model that cannot run in float64 is taken as sure)."""
    if dtype == torch.float64:
        return True
    try:
        wide = copy.deepcopy(model).double()
        inputs = [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                  for v in task_inputs.kept_inputs(module, seed, device, dtype, scale)]
        exact = forward_backward(wide, inputs, seed)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return True
    except Exception:  # noqa: BLE001 - ops without float64 kernels, models that do not copy
        return True
    for ours, wide_value in zip(result.gradients, exact.gradients):
        if not ours.is_floating_point():
            continue
        atol, rtol = tolerances(str(ours.dtype).replace("torch.", ""), task_atol, task_rtol, run)
        if compare_tensor(ours, wide_value.to(ours.dtype), atol * _SURE_SHARE,
                          rtol * _SURE_SHARE).reason is not None:
            return False
    return True


def _float_attr(module: Any, name: str) -> float | None:
    value = getattr(module, name, None)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
