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

from kernelevo.evaluate.analysis.cost import task_cost
from kernelevo.evaluate.analysis.profile import (CALL_ANNOTATION, CPU_STAND_IN_CATEGORIES,
                                                 GPU_KERNEL_CATEGORIES, Breakdown, breakdown,
                                                 build_profile, events_from_chrome_trace)
from kernelevo.evaluate.shared import inputs as task_inputs

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
        task_inputs.synchronize(device)
        for given in sets[1:]:
            with record_function(CALL_ANNOTATION):
                model(*given)
                task_inputs.synchronize(device)
    return chrome_trace(prof)


def chrome_trace(prof: Any) -> dict[str, Any]:
    """A finished profile's chrome trace, read back as a dict."""
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


def profile_candidates(loaded: dict[int, Any], baselines: dict[str, Any], task: Any,
                       inputs: list[Any], gpu_ms: dict[str, float],
                       own_names: dict[int, set[str]], device_name: str,
                       dtype_name: str, device: str = "cuda") -> dict[str, dict[str, Any]]:
    """Each timed candidate's profile as a dict, by index; after timing, never during it.

    A profile that cannot be taken is a note in it, never a failed verdict.
    """
    notes: tuple[str, ...] = ()
    try:
        cost = task_cost(task, getattr(torch, dtype_name))
    except Exception as exc:  # a reference the meta device cannot run: no roofline
        cost, notes = None, (f"analytic cost unavailable: {type(exc).__name__}: {exc}"[:200],)
    launches = {}
    for name, model in baselines.items():
        try:
            per_call = take_breakdown(model, inputs, device=device).launches_per_call
            launches[name] = per_call / getattr(model, "calls_per_invocation", 1)
        except Exception:  # a baseline's count only adds the fusion clause
            continue
    profiles = {}
    for index, (model, _, _) in loaded.items():
        why: tuple[str, ...]
        try:
            parts, why = take_breakdown(model, inputs, own_names.get(index, ()), device=device), ()
        except Exception as exc:
            parts, why = None, (f"profiler failed: {type(exc).__name__}: {exc}"[:200],)
        profile = build_profile(parts, cost, gpu_ms.get(f"candidate_{index}"), device_name,
                                dtype_name, launches, notes + why)
        profiles[str(index)] = profile.to_dict()
    return profiles


def attach_profiles(shares: dict[Any, dict[str, Any]], loaded: dict[int, Any],
                    baselines: dict[str, Any], task: Any, inputs: list[Any],
                    measures: dict[str, dict[str, Any]], device_name: str,
                    dtype_name: str, device: str = "cuda") -> None:
    """Add each candidate's profile to its kernel share (keyed by index or its string)."""
    found = {index: shares.get(str(index), shares.get(index)) for index in loaded}
    own = {index: set((share or {}).get("own_names", ())) for index, share in found.items()}
    gpu_ms = {name: stats.median_ms for name, stats in measures.get("gpu", {}).items()}
    profiles = profile_candidates(loaded, baselines, task, inputs, gpu_ms, own, device_name,
                                  dtype_name, device)
    for index, share in found.items():
        if share is not None and str(index) in profiles:
            share["profile"] = profiles[str(index)]
