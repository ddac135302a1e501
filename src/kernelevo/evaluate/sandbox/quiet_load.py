"""What still ran on the machine while a timing's calls ran with the other jobs stood still.

The quiet (quiet.py) stops the judge's other jobs. It does not stop the
judge's own process (its lanes' threads: decisions, copies, bookkeeping)
nor any process the judge did not start as a job. In a 32-row suite on an
H100 the judge's launch-bound calls read 1.17x a plain process's
milliseconds, both contestants alike, with the others stood still. Three
rows judged on the same machine right after read as plain's
(bench/RESULTS.md, "Against a plain process", session 36). So each of a
worker's quiets is measured from the moment the others stand still until
they go on (in the next such suite: 0.05 busy cores at the median, no steal;
the timing core's own speed moved instead). A verdict's phases say:

- `quiet`: the seconds of that;
- `quiet_busy_elsewhere`: CPU seconds busy on the cores not kept for
  timing (/proc/stat). On a machine that keeps none, every core counts,
  the timing's own among them;
- `quiet_judge_cpu`: of those, the judge's own process (every thread);
- `quiet_steal`: seconds the hypervisor gave the kept cores to others
  (steal time, where the kernel reports it).

Over a suite they sum to busy cores on average (`suite/time_spent.py`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Mapping

from kernelevo.evaluate.shared.cores import kept_cores

_BUSY = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq (guest time is inside user)
_STEAL = 7


@dataclass(frozen=True)
class Reading:
    """The machine's and the judge's CPU seconds at one moment."""

    at: float  # monotonic
    busy_elsewhere: float
    steal_kept: float
    judge_cpu: float


def read(kept: set[int], stat_path: str = "/proc/stat") -> Reading | None:
    """The counters now; None where /proc/stat is not there to read (another OS)."""
    try:
        with open(stat_path) as stat:
            lines = stat.read().splitlines()
    except OSError:
        return None
    tick = _clock_ticks()
    busy = steal = 0
    for line in lines:
        name, *values = line.split() or [""]
        if not name.startswith("cpu") or not name[3:].isdigit():
            continue
        counts = [int(value) for value in values[:8]] + [0] * (8 - len(values[:8]))
        if int(name[3:]) in kept:
            steal += counts[_STEAL]
        else:
            busy += sum(counts[index] for index in _BUSY)
    return Reading(time.monotonic(), busy / tick, steal / tick, time.process_time())


@dataclass
class QuietLoad:
    """One worker's quiets, summed: open one with `start`, close it with `end`."""

    kept: set[int] = field(default_factory=set)
    seconds: float = 0.0
    busy_elsewhere: float = 0.0
    judge_cpu: float = 0.0
    steal: float = 0.0
    _open: Reading | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def for_children(cls, environment: Mapping[str, str]) -> "QuietLoad":
        """Counting as kept the cores the judge names to its children for timing."""
        return cls(kept=kept_cores(environment))

    def start(self) -> None:
        """The others stand still from now (a quiet already open stays open)."""
        with self._lock:
            if self._open is None:
                self._open = read(self.kept)

    def end(self) -> None:
        """The others go on now: the open quiet, if any, is added."""
        with self._lock:
            began, self._open = self._open, None
            now = read(self.kept) if began is not None else None
            if began is None or now is None:
                return
            self.seconds += now.at - began.at
            self.busy_elsewhere += max(0.0, now.busy_elsewhere - began.busy_elsewhere)
            self.judge_cpu += max(0.0, now.judge_cpu - began.judge_cpu)
            self.steal += max(0.0, now.steal_kept - began.steal_kept)

    def phases(self) -> dict[str, float]:
        """The verdict's phases (module docstring); none if no quiet was measured."""
        if self.seconds <= 0:
            return {}
        return {"quiet": self.seconds, "quiet_busy_elsewhere": self.busy_elsewhere,
                "quiet_judge_cpu": self.judge_cpu, "quiet_steal": self.steal}


def _clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK") or 100
    except (ValueError, OSError, AttributeError):
        return 100
