"""Taking a profile in the worker: torch.profiler over a few annotated calls, after timing.

Each call runs inside a CALL_ANNOTATION span that ends with a device
synchronisation, so the span covers the call's GPU work and the breakdown
can tell kernel time from the time around it. The trace goes through
torch's chrome-trace export, the one place its kernels' grid and block sizes
appear, and is parsed by `profile.breakdown`.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Iterable

import torch

from kernelevo.evaluate import inputs as task_inputs
from kernelevo.evaluate.profile import (CALL_ANNOTATION, CPU_STAND_IN_CATEGORIES,
                                        GPU_KERNEL_CATEGORIES, Breakdown, breakdown,
                                        events_from_chrome_trace)

PROFILED_CALLS = 3


def record_trace(model: Any, inputs: list[Any], calls: int = PROFILED_CALLS,
                 device: str = "cuda") -> dict[str, Any]:
    """The chrome trace of one warm call and `calls` annotated calls of `model`."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    if device != "cpu":
        activities.append(ProfilerActivity.CUDA)
    sets = [task_inputs.clone_inputs(inputs) for _ in range(calls + 1)]
    with torch.no_grad(), profile(activities=activities) as prof:
        model(*sets[0])  # the profiler can drop the kernels at the start of a session
        _synchronize(device)
        for given in sets[1:]:
            with record_function(CALL_ANNOTATION):
                model(*given)
                _synchronize(device)
    with tempfile.TemporaryDirectory(prefix="kernelevo-trace-") as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())


def take_breakdown(model: Any, inputs: list[Any], own_names: Iterable[str] = (),
                   calls: int = PROFILED_CALLS, device: str = "cuda") -> Breakdown:
    """Where one call's time goes: kernels on a GPU, operators standing in for them on CPU."""
    trace = record_trace(model, inputs, calls, device)
    categories = CPU_STAND_IN_CATEGORIES if device == "cpu" else GPU_KERNEL_CATEGORIES
    return breakdown(events_from_chrome_trace(trace), own_names, categories)


def _synchronize(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()
