"""The own-kernel share of a training step, for a task whose backward is judged.

The forward's share (worker_timing.own_kernel_share) profiles calls under
`torch.no_grad()`, which a backward made of PyTorch's ops would never show
in. Here one training step is profiled as timing_backward.py times it: the
forward with grad on fresh leaves (gradients.grad_inputs), then the backward
of the projected loss (gradients.projections, drawn from the input set's
seed, handed to autograd as the outputs' gradient), in two annotated spans
that each end with a device synchronisation; `kernel_share.training_share`
splits the trace's kernels by span.

Taken after timing, as the forward's share is. A step whose backward shows
none of the candidate's kernels is profiled again (up to `attempts` steps in
all) before that stands; the Triton launches counted during the profiled
backwards tell lost records from a backward that launched none.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from kernelevo.evaluate.analysis.kernel_share import (GPU_CATEGORIES, TRAIN_BACKWARD,
                                                      TRAIN_FORWARD, training_share)
from kernelevo.evaluate.analysis.oom import is_out_of_memory
from kernelevo.evaluate.analysis.profile import CPU_STAND_IN_CATEGORIES, events_from_chrome_trace
from kernelevo.evaluate.child.profile_take import chrome_trace
from kernelevo.evaluate.child.timing_backward import flat
from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.gradients import grad_inputs, parameters_of, projections


def training_step_share(model: Any, names: Iterable[str], inputs: list[Any], seed: int,
                        launches: Callable[[], int] | None = None, attempts: int = 3,
                        device: str = "cuda") -> dict[str, Any]:
    """The share of one profiled training step, or `{"error": ...}` where none could be taken.

    Never raises for the candidate's sake: its training step was timed
    already, and a profile that cannot be taken is a note, not a verdict.
    """
    names = sorted(set(names))
    share: dict[str, Any] = {}
    count = launches or (lambda: 0)
    launched = 0
    try:
        for attempt in range(attempts):
            trace, counted = _profiled_step(model, inputs, seed, count, device)
            launched += counted
            categories = CPU_STAND_IN_CATEGORIES if device == "cpu" else GPU_CATEGORIES
            share = training_share(events_from_chrome_trace(trace), names, categories)
            share["profiled_steps"] = attempt + 1
            if share["backward"]["own_us"] > 0:
                break
    except Exception as exc:  # noqa: BLE001 - a profile that cannot be taken is only noted
        if device == "cuda" and is_out_of_memory(exc):
            torch.cuda.empty_cache()
        said = (str(exc).splitlines() or [""])[0][:160]
        return {"error": f"{type(exc).__name__}: {said}" if said else type(exc).__name__}
    share["launched"] = launched  # the candidate's Triton launches in the profiled backwards
    return share


def _profiled_step(model: Any, inputs: list[Any], seed: int, count: Callable[[], int],
                   device: str) -> tuple[dict[str, Any], int]:
    """The chrome trace of a warm training step and an annotated one; launches in its backward."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    if device != "cpu":
        activities.append(ProfilerActivity.CUDA)
    leaves, positions = grad_inputs(inputs)
    wanted = [leaves[p] for p in positions] + [p for _, p in parameters_of(model)]
    with torch.enable_grad(), profile(activities=activities) as prof:
        # The profiler can drop the kernels at the start of a session: a warm
        # step first, which also draws the projections outside the spans.
        outputs, picked = _forward(model, leaves)
        drawn = projections(seed, outputs)
        grads = [p for i in picked if (p := drawn[i]) is not None]
        _backward([outputs[i] for i in picked], wanted, grads, device)
        del outputs
        with record_function(TRAIN_FORWARD):
            outputs, picked = _forward(model, leaves)
            task_inputs.synchronize(device)
        before = count()
        with record_function(TRAIN_BACKWARD):
            _backward([outputs[i] for i in picked], wanted, grads, device)
        counted = count() - before
    return chrome_trace(prof), counted


def _forward(model: Any, leaves: list[Any]) -> tuple[list[Any], list[int]]:
    """The outputs of a forward with grad, and which of them carry a graph."""
    outputs = flat(model(*leaves))
    picked = [i for i, v in enumerate(outputs) if isinstance(v, torch.Tensor)
              and v.is_floating_point() and v.grad_fn is not None]
    if not picked:
        raise ValueError("no floating output carries a gradient function")
    return outputs, picked


def _backward(outputs: list[torch.Tensor], wanted: list[torch.Tensor],
              grads: list[torch.Tensor], device: str) -> None:
    """The backward of the projected loss, as the timed training step takes it."""
    torch.autograd.grad(outputs, wanted, grad_outputs=grads, allow_unused=True)
    task_inputs.synchronize(device)
