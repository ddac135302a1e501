"""The CPU core a timing runs on: one per GPU, the same for every timing on it, kept for it.

A launch-bound call's time is host time. Left to the scheduler, a timing
process moves between cores and meets whatever else runs there; pinned to
one core, the same pair's speedup moved 0.1-1.3 % between fresh processes
instead of 0.4-4.5 % (H100, bench/host_noise.py, bench/RESULTS.md). Every
contestant of a timing runs on that core alike, and only while it is timed.

Pinned is not alone: a suite's other lanes (their oracles, workers, builds
and compiles) could run on the same core meanwhile, so the timed loop
shared its core where a plain process has one to itself. On a GPU machine
the judge keeps those cores for timing: it names them to its children
(`KERNELEVO_TIMING_CORES`), and every child moves off them as it starts
(`keep_off_timing_cores`, sandbox/jobs.py); a worker's timing pins itself
to its GPU's core, the only process there. A core's hyperthread siblings
share its execution units, so they are kept free too: a compile on the
sibling slows the timed loop as one on the core itself would. A backward
on a GPU runs in autograd's device thread, which stays where a user's runs:
off the timing core (pinned beside the timing thread, a Python-launched
backward's step read 25 % quicker than in any plain process).

The judge's own process (its lanes' threads, their comparisons and
bookkeeping) moves off them too when it is KernelEvo's own, a command's
(`claim_process`): with every child off the kept cores, those idle cores
are where the scheduler puts a busy thread. A program that uses the judge
as a library keeps its threads where it put them.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Mapping

TIMING_CORES_ENV = "KERNELEVO_TIMING_CORES"
# Below this many allowed cores none is kept for timing: the others would be too few.
MIN_CORES_TO_KEEP = 4


def timing_cores(gpu_count: int) -> list[int]:
    """The cores to keep for timing on a machine of `gpu_count` GPUs, by GPU ordinal.

    The last allowed ones, one per GPU, each with its hyperthread siblings,
    while at least half the allowed cores are left (GPUs beyond share, by
    ordinal); none where fewer than `MIN_CORES_TO_KEEP` are allowed.
    """
    if not hasattr(os, "sched_getaffinity") or gpu_count < 1:
        return []
    # The cores this process left for timing count as allowed: named again, not the next
    # ones down (each judge of a suite named one core lower, until none was kept).
    allowed = sorted(os.sched_getaffinity(0) | _left)
    if len(allowed) < MIN_CORES_TO_KEEP:
        return []
    # one per GPU, with its siblings, while half the allowed cores stay for the rest
    chosen: list[int] = []
    left = set(allowed)
    for core in reversed(allowed):
        if len(chosen) == gpu_count:
            break
        taken = siblings(core) & left
        if core not in left or len(left) - len(taken) < len(allowed) / 2:
            continue
        chosen.append(core)
        left -= taken
    return chosen


def _kept(environ: Mapping[str, str] | None) -> list[int]:
    """The cores the judge named for timing, in ordinal order; none if it named none."""
    said = (environ if environ is not None else os.environ).get(TIMING_CORES_ENV, "")
    return [int(core) for core in said.split(",") if core.strip().isdigit()]


def kept_cores(environ: Mapping[str, str] | None = None) -> set[int]:
    """Every core kept for timing, their hyperthread siblings included; none if none is."""
    return {sibling for core in _kept(environ) for sibling in siblings(core)}


def timing_core(gpu_ordinal: int = 0, environ: Mapping[str, str] | None = None) -> int | None:
    """The core for timing on the GPU of this ordinal: the one kept for it, else counted
    back from the last allowed one."""
    kept = _kept(environ)
    if kept:
        return kept[gpu_ordinal % len(kept)]
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None  # one core: nothing to choose
    return allowed[-1 - gpu_ordinal % len(allowed)]


def siblings(core: int, root: str = "/sys/devices/system/cpu") -> set[int]:
    """The logical cores sharing `core`'s physical core (itself included), as sysfs says."""
    try:
        with open(f"{root}/cpu{core}/topology/thread_siblings_list") as listing:
            said = listing.read().strip()
    except OSError:  # no sysfs (another OS, a container without it): the core alone
        return {core}
    found = {core}
    for part in filter(None, said.split(",")):
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            found.update(range(int(low), int(high or low) + 1))
    return found


_claimed = False  # whether this process is a command's, every thread of it ours
_left: set[int] = set()  # the kept cores this process moved off (keep_off_timing_cores)


def claim_process() -> None:
    """Say this process is KernelEvo's own (a command's): the judge moves every thread of
    it off the cores it keeps for timing (parent/judge.py)."""
    global _claimed
    _claimed = True


def process_claimed() -> bool:
    return _claimed


def keep_off_timing_cores(environ: Mapping[str, str] | None = None,
                          every_thread: bool = False) -> set[int] | None:
    """Move this process (its calling thread, and the threads and processes it starts
    later; with `every_thread`, its other threads too) off the cores kept for timing and
    their hyperthread siblings; the cores the calling thread runs on now, or None if
    unchanged."""
    kept = kept_cores(environ)
    if not kept or not hasattr(os, "sched_getaffinity"):
        return None
    allowed = os.sched_getaffinity(0)
    rest = allowed - kept
    if not rest or rest == allowed:
        return None
    try:
        os.sched_setaffinity(0, rest)
    except OSError:  # a core set this process may not narrow: it runs where it did
        return None
    _left.update(allowed & kept)
    for thread, _ in (_threads() if every_thread else []):
        try:
            mask = os.sched_getaffinity(thread)
            if mask - kept and mask & kept:
                os.sched_setaffinity(thread, mask - kept)
        except OSError:  # ended meanwhile
            pass
    return rest


def visible_gpu_ordinal(environ: dict[str, str] | None = None) -> int:
    """The machine's ordinal of this process's GPU (the first of CUDA_VISIBLE_DEVICES)."""
    first = (environ if environ is not None else os.environ).get(
        "CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def _threads(tasks: str = "/proc/self/task") -> list[tuple[int, str]]:
    """(native id, name) of each of this process's threads; none where there is no /proc."""
    try:
        ids = os.listdir(tasks)
    except OSError:
        return []
    found = []
    for tid in filter(str.isdigit, ids):
        try:
            with open(f"{tasks}/{tid}/comm") as comm:
                found.append((int(tid), comm.read().strip()))
        except OSError:  # ended meanwhile
            continue
    return found


@contextmanager
def on_timing_core(core: int | None) -> Iterator[int | None]:
    """Run the calling thread on `core` for the block, then where it ran before; the
    process's other threads stay where they are."""
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


def core_words(core: int | None, environ: Mapping[str, str] | None = None) -> str:
    """How a timing ran, for its verdict: on which core, and whether it was kept free."""
    if core is None:
        return "unpinned"
    if core not in _kept(environ):
        return f"{core}, shared with the judge's other processes"
    others = sorted(siblings(core) - {core})
    return f"{core}, kept free" + (f" with its hyperthread sibling {','.join(map(str, others))}"
                                   if others else "")
