"""Which task a lane judges next: quickest first, and only where the GPU has the memory for it.

The first rows of a suite come from the tasks quickest to judge: those whose
solutions need no CUDA build (a cold nvcc build takes 15-40 s) come first,
then the smaller before the larger. Tasks that need builds keep the order
their builds ahead were started in. A queue hands them out as soon as each is
loaded, in a thread of its own, so the first lane starts its first task at
once while the rest are still being sized.

A lane takes a task only where its estimated footprint (suite/footprint.py)
fits in what its GPU has free less what the lanes running there are still
expected to take (`MemoryBook`); a lane alone on its GPU always takes one.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kernelevo.suite.footprint import LANE_MIN_BYTES
from kernelevo.suite.tasks import Solution, SuiteTask

_POLL_S = 0.2  # how often a lane waiting for memory looks again (sessions end on their own)


@dataclass
class PlannedTask:
    """One task of the suite with its pending solutions, once loaded and sized."""

    task: SuiteTask
    pending: list[Solution]
    position: int  # in the suite's order of tasks
    needs_build: bool  # a solution is CUDA source, compiled before it is judged
    loaded: Any = None  # the task (shrunk where asked), once prepared
    sizes: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # why the task cannot be loaded
    lane_bytes: int = 0  # GPU memory a lane judging it may hold (0: unknown)
    lane_bytes_from: str = ""  # "peaks" (an earlier suite's, lane_peaks.py), "sizes" (footprint.py)
    lane_processes: int = 0  # whose CUDA contexts the size counts (footprint.lane_processes)
    peaks_key: str = ""  # its entry among the recorded peaks, where they are kept
    ready: bool = False


def order_key(planned: PlannedTask) -> tuple[int, int, int]:
    """Quickest to judge first: no build before builds, then the smaller task.

    Tasks with builds keep the suite's order, the one their builds ahead run in.
    """
    size = 0 if planned.needs_build else planned.lane_bytes
    return (int(planned.needs_build), size, planned.position)


def judging_order(planned: list[PlannedTask]) -> list[PlannedTask]:
    return sorted(planned, key=order_key)


def fits(need_bytes: int, free_bytes: int, idle_free_bytes: int, reserved_bytes: int) -> bool:
    """Whether a task of `need_bytes` may start beside lanes that reserved `reserved_bytes`.

    What the running lanes hold now shows in `free_bytes` (what was free with
    no lane running, less what is free now); what they are expected to take
    beyond that is still to come, and not free for the new task. A lane alone
    on its GPU (nothing reserved) always starts: waiting cannot make room.
    """
    if reserved_bytes <= 0:
        return True
    held = max(0, idle_free_bytes - free_bytes)
    still_to_take = max(0, reserved_bytes - held)
    return need_bytes <= free_bytes - still_to_take


def lanes_for_memory(lanes_by_cores: int, free_bytes: int | None) -> int:
    """Lanes per GPU: as the cores allow, but no more than the free memory holds
    (each lane's processes hold a CUDA context each, whatever the task)."""
    if free_bytes is None:
        return lanes_by_cores
    return max(1, min(lanes_by_cores, free_bytes // LANE_MIN_BYTES))


def gpu_memory(gpu_index: int | None) -> tuple[int, int] | None:
    """(free, total) bytes of one GPU, or None where there is no GPU to ask."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info(gpu_index or 0)
    except Exception:  # noqa: BLE001 - no GPU to ask: no memory-based decisions
        return None
    return int(free), int(total)


class MemoryBook:
    """The GPU memory the lanes of one GPU are expected to take, against what is free."""

    def __init__(self, read: Callable[[], tuple[int, int] | None]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._reserved: dict[int, int] = {}  # by reservation number
        self._numbers = iter(range(1, 1 << 62))
        first = read()
        self.total_bytes = first[1] if first else None
        self._idle_free = first[0] if first else 0

    def admit(self, need_bytes: int) -> int | None:
        """A reservation number for a task of `need_bytes`, or None while it does not fit."""
        with self._lock:
            reading = self._read()
            reserved = sum(self._reserved.values())
            if reading is not None:
                if not reserved:  # no lane here: what is free now is the idle figure
                    self._idle_free = max(self._idle_free, reading[0])
                if not fits(need_bytes, reading[0], self._idle_free, reserved):
                    return None
            number = next(self._numbers)
            self._reserved[number] = need_bytes
            return number

    def release(self, number: int | None) -> None:
        with self._lock:
            self._reserved.pop(number or 0, None)

    def reserved_bytes(self) -> int:
        with self._lock:
            return sum(self._reserved.values())


class TaskQueue:
    """The suite's tasks not yet taken, handed out in judging order as each is prepared."""

    def __init__(self, planned: list[PlannedTask], prepare: Callable[[PlannedTask], None],
                 limit_s: float = 60.0, lanes: int = 1) -> None:
        self._entries = list(planned)
        self._prepare = prepare
        self._limit_s = limit_s
        self._condition = threading.Condition()
        self._without_task = set(range(lanes))  # lanes with no task (yet): they go first

    def plan(self) -> None:
        """Prepare every task in turn (a lane may take each once ready), then order them all."""
        for entry in list(self._entries):
            self._prepare_within(entry)
            with self._condition:
                entry.ready = True
                self._condition.notify_all()
        with self._condition:
            self._entries = judging_order(self._entries)
            self._condition.notify_all()

    def _prepare_within(self, entry: PlannedTask) -> None:
        """Prepare one task, in a thread of its own: a task's code that never ends
        (its import looping) holds up no other task, only its own row."""
        done = threading.Event()

        def prepare() -> None:
            try:
                self._prepare(entry)
            except Exception as exc:  # noqa: BLE001 - a row per solution says why
                entry.error = f"{type(exc).__name__}: {exc}"
            finally:
                done.set()

        threading.Thread(target=prepare, name="suite-plan-task", daemon=True).start()
        if not done.wait(self._limit_s):
            entry.error = (f"loading the task took more than {self._limit_s:g} s ([eval] "
                           "import_timeout_s): a task must import quickly; move slow work "
                           "(loops, downloads, large allocations) out of its top level")

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.plan, name="suite-plan", daemon=True)
        thread.start()
        return thread

    def take(self, admit: Callable[[PlannedTask], Any], wait_for_memory: bool,
             stopped: Callable[[], bool], lane: int = 0) -> tuple[PlannedTask | None, Any, float]:
        """(the first prepared task that `admit` lets in, its admission, the seconds
        waited for one to fit); no task when none is left or the suite stops.

        Without `wait_for_memory` (`lane` taking its next task ahead), also no
        task when every task left is prepared and none fits now, or while
        another lane has no task: that lane goes first.
        """
        refused_s = 0.0
        with self._condition:
            if wait_for_memory:
                self._without_task.add(lane)
            try:
                while self._entries and not stopped():
                    if not wait_for_memory and self._without_task - {lane}:
                        return None, None, refused_s
                    ready = [e for e in self._entries if e.ready]
                    for entry in ready:
                        admission = admit(entry)
                        if admission is not None:
                            self._entries.remove(entry)
                            return entry, admission, refused_s
                    if len(ready) == len(self._entries) and not wait_for_memory:
                        return None, None, refused_s
                    started = time.monotonic()
                    self._condition.wait(_POLL_S)
                    if ready:  # a task was there, the memory for it was not
                        refused_s += time.monotonic() - started
                return None, None, refused_s
            finally:
                if wait_for_memory:  # with a task now, or with none left to take
                    self._without_task.discard(lane)
                self._condition.notify_all()

    def left(self) -> int:
        with self._condition:
            return len(self._entries)
