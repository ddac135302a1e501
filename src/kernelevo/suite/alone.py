"""Lanes never cause a verdict: memory that ran out beside other lanes is tried again alone.

Lanes of one GPU share its memory. A reference or a candidate that runs out
of it while other lanes (or this lane's own session kept warm for the next
solution) hold memory says nothing about the solution: it is judged again
alone. `GpuRoom` makes that run alone: no lane starts judging on the GPU
while one waits for it, the lanes judging finish their solution, and every
session kept warm on the GPU is ended first. Only a run alone that still
runs out gives an `out_of_memory` row, naming whose process it was and the
size it asked for.
"""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from kernelevo.evaluate.analysis.oom import requested_size, said_in
from kernelevo.evaluate.parent.outcome import WARM_UP

# The size a message says was asked for, in its units: "Tried to allocate 36.38 GiB".
_SIZE = re.compile(r"(\d+(?:\.\d+)?) ?([KMGTP]i?B|bytes)")
_UNIT_BYTES = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
               "PiB": 1 << 50, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40,
               "PB": 1 << 50}
_JUDGE = "the judge's process ran out"  # judge.py: the reference's and candidate's outputs


@dataclass(frozen=True)
class OutOfMemory:
    """Memory that ran out while judging: whose process, and the size it asked for."""

    whose: str  # "reference" (the oracle or the baselines), "candidate" or "judge"
    asked: str | None  # "36.38 GiB", as the message gives it
    message: str

    @property
    def asked_bytes(self) -> int | None:
        match = _SIZE.fullmatch(self.asked or "")
        return int(float(match.group(1)) * _UNIT_BYTES[match.group(2)]) if match else None


def out_of_memory_in(outcome: Any) -> OutOfMemory | None:
    """The memory that ran out in a judge's outcome (a Verdict, or the TaskError of a
    reference that failed), or None when it was something else."""
    from kernelevo.errors import KernelEvoError, TaskError

    if isinstance(outcome, KernelEvoError):
        text = str(outcome)
        if not isinstance(outcome, TaskError) or not said_in(text):
            return None
        return OutOfMemory("reference", asked_in(text), text)
    if getattr(outcome, "reason", None) != "out_of_memory":
        return None
    message = outcome.message
    whose = ("judge" if message.startswith(_JUDGE) else
             "reference" if WARM_UP in message else "candidate")
    return OutOfMemory(whose, asked_in(f"{message}\n{outcome.logs}"), message)


def asked_in(text: str) -> str | None:
    """The size the failed allocation asked for: PyTorch's words, or the judge's own
    ("it tried to allocate 36.38 GiB")."""
    size = requested_size(text)
    if size:
        return size
    found = re.findall(r"tried to allocate (\d+(?:\.\d+)? ?[KMGTP]i?B)", text)
    return found[-1] if found else None


def worth_running_alone(oom: OutOfMemory, company: bool, total_bytes: int | None) -> bool:
    """Whether to judge again alone: memory ran out beside something else that held
    some, and what was asked for could fit in the whole GPU."""
    if not company:
        return False
    asked = oom.asked_bytes
    return asked is None or total_bytes is None or asked < total_bytes


def row_message(oom: OutOfMemory, alone: bool) -> str:
    """The row's message: whose process ran out, the size, and whether it ran alone."""
    size = f" (it tried to allocate {oom.asked})" if oom.asked else ""
    when = " when judged alone on the GPU" if alone else ""
    fix = {"reference": ": give the task smaller sizes (--max-input-elements)",
           "candidate": "", "judge": ""}[oom.whose]
    first = oom.message.strip().splitlines()[0] if oom.message.strip() else ""
    return f"the {oom.whose} ran out of memory{size}{when}{fix}" + (f"; {first}" if first else "")


class Entry:
    """One lane's stay inside a GPU's room; `waited_s`: seconds it waited to come in."""

    def __init__(self, lane: int, waited_s: float) -> None:
        self.lane, self.waited_s = lane, waited_s


class GpuRoom:
    """The lanes of one GPU: side by side, or one alone while every other waits.

    A lane is inside while it judges (or starts sessions); `alone()` waits
    for every other stay to end, ends every session kept warm on the GPU,
    and keeps the others out until its run is done. Coming in waits while a
    lane waits to be alone, so that wait ends once the running solutions do.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._inside: set[Entry] = set()
        self._lanes: set[int] = set()  # lanes alive on this GPU
        self._judges: dict[int, Any] = {}  # judges whose warm sessions go for a run alone
        self._wanting = 0
        self._alone: Entry | None = None

    def join(self, lane: int) -> None:
        with self._condition:
            self._lanes.add(lane)

    def quit(self, lane: int) -> None:
        with self._condition:
            self._lanes.discard(lane)
            self._condition.notify_all()

    def add_judge(self, judge: Any) -> None:
        with self._condition:
            self._judges[id(judge)] = judge

    def remove_judge(self, judge: Any) -> None:
        with self._condition:
            self._judges.pop(id(judge), None)

    def company(self, lane: int, judge: Any) -> bool:
        """Whether anything else may hold memory on this GPU: another lane, or another
        judge (this lane's next task, warmed ahead)."""
        with self._condition:
            return bool(self._lanes - {lane}) or any(j is not judge
                                                     for j in self._judges.values())

    @contextmanager
    def inside(self, lane: int) -> Iterator[Entry]:
        """Judge (or start sessions) on the GPU, once no lane waits to be alone."""
        started = time.monotonic()
        with self._condition:
            while self._wanting or self._alone is not None:
                self._condition.wait()
            entry = Entry(lane, time.monotonic() - started)
            self._inside.add(entry)
        try:
            yield entry
        finally:
            with self._condition:
                self._inside.discard(entry)
                self._condition.notify_all()

    @contextmanager
    def alone(self, entry: Entry) -> Iterator[float]:
        """Run alone on the GPU from inside (`entry`); the seconds waited for it."""
        started = time.monotonic()
        with self._condition:
            self._inside.discard(entry)
            self._wanting += 1
            try:
                while self._alone is not None or self._inside:
                    self._condition.wait()
            finally:
                self._wanting -= 1
            self._alone = entry
            judges = list(self._judges.values())
        try:
            for judge in judges:  # sessions kept warm hold memory too: they go
                judge.close()
            if judges and hasattr(judges[0], "release_memory"):
                judges[0].release_memory()  # this process's cached blocks, back to the GPU
            yield time.monotonic() - started
        finally:
            with self._condition:
                self._alone = None
                self._inside.add(entry)  # back inside: the run goes on to its row
                self._condition.notify_all()
