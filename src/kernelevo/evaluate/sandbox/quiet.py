"""Other jobs held still while calls are timed, as a plain process times alone.

A launch-bound call's time is the host's time to queue it, and that time
follows what the machine's other cores do, not only the timing core: on an
H100 host, the same pair's plain loop on a core of its own read 1.4-1.8x
slower with a Python loop or a memory-copying loop on each other core, and
the speedup moved 0.82-1.35x; with those loops stopped (SIGSTOP) both
contestants read as on a quiet machine (1.01-1.09x; `bench/host_load.py`,
bench/RESULTS.md). Keeping the timing core free (shared/cores.py) does not
help there: the shared cache, memory bandwidth and clock do the slowing. So
while a worker times its calls (the call measure: whether a call is
launch-bound is itself read off the host, and 20 us calls fell either side),
the judge stops every other job's processes (their oracles, workers, builds
and compiles) and continues them after.

A timing's quiet lasts MOST_S at most, counted from its first ask while it
holds the GPU alone: the call measures it is asked for take under a second
(0.18-0.46 s a row in a suite on an H100). Past that,
the others go on and the timing's further asks are refused until its hold
leaves the timing phase: a candidate that asks and never lets go (or asks
again and again), or a stopped job holding something the timing waits for
(a file lock, say), stands the rest of the machine still for seconds, never
until a limit runs out.

Only a job that holds the GPU alone may ask (its session checks that), and
a job that holds the GPU alone is never stopped: on a machine of several
GPUs, two timings can run at once. A stopped job's wall-clock limit waits
while it stands, so it is never timed out for it. A job started while
others stand still is stopped as it registers. Each is continued when the
last timing that asked lets go, when that timing's hold on the GPU leaves
the timing phase, or when the job ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Protocol


# The longest a timing stands the other jobs still (module docstring).
MOST_S = 10.0


class _Limit(Protocol):
    at: float


_lock = threading.Lock()
_jobs: dict[int, _Limit] = {}  # every live job's first process -> its wall-clock limit
_timing: set[int] = set()  # jobs holding a GPU alone now: never stopped
_asking: set[int] = set()  # jobs whose timing asked for the others to stand still
# stopped jobs -> (when they stopped (monotonic), the seconds their limit had left)
_held: dict[int, tuple[float, float]] = {}
_stood: dict[int, float] = {}  # live jobs -> seconds stood still so far
# jobs that asked while holding the GPU alone -> the number of that hold's first ask (its
# timer cuts that hold's quiet, no later one's)
_budget: dict[int, int] = {}
_cut: set[int] = set()  # jobs whose quiet ran past MOST_S: refused until they leave timing
_count = 0  # holds that asked, so far


def register(pid: int, limit: _Limit) -> None:
    """A job started: it is held at once if a timing asks for quiet now."""
    with _lock:
        _jobs[pid] = limit
        if _asking and pid not in _timing:
            _stop(pid)


def unregister(pid: int) -> float:
    """A job ended (or is being ended): continued, so it can exit, and forgotten; the
    seconds it stood still in all."""
    with _lock:
        _continue(pid)
        _jobs.pop(pid, None)
        _timing.discard(pid)
        _asking.discard(pid)
        _budget.pop(pid, None)
        _cut.discard(pid)
        _release_if_unasked()
        return _stood.pop(pid, 0.0)


def ending(pid: int) -> None:
    """A job is being ended: continued, so it can exit, and never stopped again."""
    with _lock:
        _continue(pid)
        _jobs.pop(pid, None)


def timing(pid: int | None, on: bool) -> None:
    """Whether the job `pid` holds a GPU alone: while it does it is never stopped (it is
    continued now if a quiet asked for by another GPU's timing held it). Leaving, its own
    ask for quiet ends."""
    if pid is None:
        return
    with _lock:
        if on:
            _timing.add(pid)
            _continue(pid)
            return
        _timing.discard(pid)
        _asking.discard(pid)
        _budget.pop(pid, None)
        _cut.discard(pid)
        _release_if_unasked()
        if _asking and pid in _jobs:  # another GPU's timing still wants quiet
            _stop(pid)


def hold_others(pid: int) -> int:
    """Stop every other job not timing, for the timing of job `pid`, until MOST_S after its
    first ask in this hold; how many are held (none once its quiet was cut)."""
    global _count
    with _lock:
        if pid in _cut:
            return 0
        _asking.add(pid)
        if pid not in _budget:
            _count += 1
            _budget[pid] = _count
            cutter = threading.Timer(MOST_S, _cut_off, (pid, _count))
            cutter.daemon = True
            cutter.start()
        for other in _jobs:
            if other not in _timing and other not in _asking and other not in _held:
                _stop(other)
        return len(_held)


def release(pid: int) -> float:
    """The timing of job `pid` needs quiet no more; others' processes go on unless
    another timing still asks. MOST_S if its quiet had been cut there, else 0."""
    with _lock:
        _asking.discard(pid)
        _release_if_unasked()
        return MOST_S if pid in _cut else 0.0


def _cut_off(pid: int, number: int) -> None:
    """MOST_S after the first ask of hold `number` of job `pid`: if that hold lasts, its
    quiet ends and it asks in vain from now on."""
    with _lock:
        if _budget.get(pid) != number:
            return
        _cut.add(pid)
        _asking.discard(pid)
        _release_if_unasked()


def held() -> list[int]:
    """The jobs stopped now (for tests and logs)."""
    with _lock:
        return sorted(_held)


def _release_if_unasked() -> None:
    if not _asking:
        for pid in list(_held):
            _continue(pid)


def _stop(pid: int) -> None:
    """Lock held: stop the job's process and its process group (each job is a session
    of its own once started; before that, its one process). Its limit waits meanwhile."""
    _signal(pid, signal.SIGSTOP)
    now, limit = time.monotonic(), _jobs.get(pid)
    _held[pid] = (now, float("inf") if limit is None else limit.at - now)
    if limit is not None:
        limit.at = float("inf")


def _continue(pid: int) -> None:
    """Lock held: continue a stopped job, its limit as far off as when it stopped."""
    stopped = _held.pop(pid, None)
    if stopped is None:
        return
    _signal(pid, signal.SIGCONT)
    now, (since, left) = time.monotonic(), stopped
    _stood[pid] = _stood.get(pid, 0.0) + now - since
    limit = _jobs.get(pid)
    if limit is not None and limit.at == float("inf"):  # not restarted meanwhile
        limit.at = now + left


def _signal(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, number)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, number)  # its compilers and builds, its keeper's worker
