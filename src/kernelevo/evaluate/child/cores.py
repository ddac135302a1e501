"""The CPU core a timing runs on: one per GPU, the same for every timing on it.

A launch-bound call's time is host time. Left to the scheduler, a timing
process moves between cores and meets whatever else runs there; pinned to
one core, the same pair's speedup moved 0.1-1.3 % between fresh processes
instead of 0.4-4.5 % (H100, bench/host_noise.py, bench/RESULTS.md). Every
contestant of a timing runs on that core alike, and only while it is timed.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator


def timing_core(gpu_ordinal: int = 0) -> int | None:
    """The core for timing on the GPU of this ordinal: counted from the last allowed one."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None  # one core: nothing to choose
    return allowed[-1 - gpu_ordinal % len(allowed)]


def visible_gpu_ordinal(environ: dict[str, str] | None = None) -> int:
    """The machine's ordinal of this process's GPU (the first of CUDA_VISIBLE_DEVICES)."""
    first = (environ if environ is not None else os.environ).get(
        "CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


@contextmanager
def on_timing_core(core: int | None) -> Iterator[int | None]:
    """Run the calling thread on `core` for the block, then where it ran before."""
    if core is None:
        yield None
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {core})
    except OSError:  # a core this process may not use (a cpuset): time unpinned
        yield None
        return
    try:
        yield core
    finally:
        os.sched_setaffinity(0, before)
