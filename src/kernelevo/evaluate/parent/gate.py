"""Who may use a GPU at once: timing alone, everything else side by side.

Several evaluations can share one GPU (pipelining): their oracles, their
workers' warm-up and their correctness checks overlap. Timing must not: a
candidate timed while another process runs kernels on the same GPU reads
slower. Each GPU has one `GpuGate`, a readers-writer lock held by the judge
process on its children's behalf: shared for any GPU work, exclusive for a
timing phase. A waiting timing phase goes first: no new shared holder enters
while it waits, so timing never starves behind a stream of checks. Among
timing phases, one that ends a verdict (a candidate's) goes before one that
only prepares for later verdicts (a warm-up timing a task's baselines for
the store), so a suite's first verdicts do not wait for every lane's
warm-up, unless a verdict already waits for that warm-up (its session was
given candidates): then it is urgent too. An urgent timing waits only for
work already on the GPU: no new work starts while it waits. A warm-up's
timing that nobody waits for holds no work back: it takes the GPU at the
first moment no work holds it (after a candidate's timing, or when the
lanes' checks happen to end together), and new work goes on beside the
holders of the moment until then, so it never empties the GPU of every
lane's work for itself. Before, each such timing stopped all new work
until the work in progress ended: about one such stop per task in a suite.

A wait can be given up (`give_up`, polled): a job killed or a process
stopping must not sit behind another job's hold, nor keep a lane or a
shutdown waiting on it. A timing phase's wait comes back with who held the
GPU meanwhile, and how long (by the holders' labels), for its verdict's phases.
A timing phase that waits LONG_WAIT_S logs who holds the GPU then, each
holder with its state (a standby warming up, a job's checks): a wait that
long is a cycle or a stuck holder, and the log names it.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Callable, Iterator

from kernelevo.logs import get_logger

GiveUp = Callable[[], bool]
_POLL_S = 0.1  # how often a wait that may be given up looks again
# A timing phase's wait this long is logged with the holders of the moment
# (a suite's timings wait 1-6 s on average: bench/RESULTS.md).
LONG_WAIT_S = 30.0
_log = get_logger(__name__)

_gates: dict[str, "GpuGate"] = {}
_gates_lock = threading.Lock()


class GateAbandoned(RuntimeError):
    """A wait for the gate was given up: its job was killed or the process is stopping."""


class GpuGate:
    """A readers-writer lock with writer preference, for one GPU."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._writers_waiting = 0
        self._urgent_waiting = 0  # of those, timing phases that end a verdict
        # The shared holders' labels and since when they hold, by owner; and,
        # for each timing phase waiting, the seconds each label held meanwhile.
        self._holding: dict[int, tuple[str, float]] = {}
        self._owners: dict[int, object] = {}  # the shared holders, asked their state
        self._ledgers: list[tuple[float, dict[str, float]]] = []

    def acquire_shared(self, give_up: GiveUp | None = None, owner: object = None,
                       label: str = "other") -> None:
        with self._condition:
            self._check(give_up)  # a stopped job takes no new hold, even one free at once
            while self._exclusive or self._urgent_waiting or self._idle_for_warm_up():
                self._wait(give_up)
            self._shared += 1
            self._holding[id(owner)] = (label, time.monotonic())
            self._owners[id(owner)] = owner

    def _idle_for_warm_up(self) -> bool:
        """No work holds the GPU and a warm-up's timing waits for it (condition held): the
        timing goes before new work, which would otherwise keep it waiting until urgent."""
        return not self._shared and self._writers_waiting > self._urgent_waiting

    def release_shared(self, owner: object = None) -> None:
        with self._condition:
            if self._shared <= 0:
                raise RuntimeError("release_shared without a shared hold")
            self._shared -= 1
            label, since = self._holding.pop(id(owner), ("other", time.monotonic()))
            self._owners.pop(id(owner), None)
            now = time.monotonic()
            for started, ledger in self._ledgers:
                ledger[label] += now - max(since, started)
            if not self._shared:
                self._condition.notify_all()

    def acquire_exclusive(self, give_up: GiveUp | None = None,
                          urgent: bool | Callable[[], bool] = True) -> dict[str, float]:
        """Take the GPU alone; the seconds each label held it while this waited.

        Not `urgent` (a warm-up's timing): every urgent timing phase waiting
        goes first. A callable is asked again while this waits (polled): a
        warm-up's timing turns urgent once a verdict waits for it (Session).
        """
        entry: tuple[float, dict[str, float]] = (time.monotonic(), defaultdict(float))
        promote = urgent if callable(urgent) else None
        now_urgent = bool(promote()) if promote is not None else bool(urgent)
        with self._condition:
            self._check(give_up)
            self._writers_waiting += 1
            self._urgent_waiting += int(now_urgent)
            self._ledgers.append(entry)
            logged = False
            try:
                while (self._exclusive or self._shared
                       or (not now_urgent and self._urgent_waiting)):
                    self._wait(give_up, _POLL_S if promote is not None else LONG_WAIT_S)
                    if promote is not None and not now_urgent and promote():
                        now_urgent = True
                        self._urgent_waiting += 1
                    if not logged and time.monotonic() - entry[0] >= LONG_WAIT_S:
                        logged = True
                        _log.warning("a timing phase has waited %.0f s for the GPU; it is held "
                                     "by: %s", time.monotonic() - entry[0],
                                     "; ".join(self._holders_now()) or "a timing phase")
            finally:
                self._writers_waiting -= 1
                self._urgent_waiting -= int(now_urgent)
                self._ledgers.remove(entry)
                # shared waiters held back by this one go on; a warm-up's timing
                # held back by this one may go next
                self._condition.notify_all()
            self._exclusive = True
        return dict(entry[1])

    def _holders_now(self) -> list[str]:
        """Each shared holder (condition held): its label, seconds held, and its state."""
        now, shown = time.monotonic(), []
        for key, (label, since) in self._holding.items():
            about = getattr(self._owners.get(key), "about", None)
            state = about() if callable(about) else ""
            shown.append(f"{label} for {now - since:.0f} s" + (f" ({state})" if state else ""))
        return shown

    @staticmethod
    def _check(give_up: GiveUp | None) -> None:
        if give_up is not None and give_up():
            raise GateAbandoned("gave up waiting for the GPU: the job was stopped")

    def _wait(self, give_up: GiveUp | None, longest_s: float | None = None) -> None:
        """One wait on the condition (held); raises GateAbandoned once `give_up()` is true."""
        if give_up is None:
            self._condition.wait(longest_s)
            return
        self._check(give_up)
        self._condition.wait(_POLL_S)

    def downgrade(self, owner: object = None, label: str = "other") -> None:
        """From the exclusive hold to a shared one, without letting go in between.

        A timing phase's process profiles next: no timing may run beside that,
        but it need not wait behind the timings queued meanwhile either (they
        go first when a hold is released and asked for again), only they wait
        for it now, as for any shared holder.
        """
        with self._condition:
            if not self._exclusive:
                raise RuntimeError("downgrade without the exclusive hold")
            self._exclusive = False
            self._shared += 1
            self._holding[id(owner)] = (label, time.monotonic())
            self._owners[id(owner)] = owner
            self._condition.notify_all()

    def release_exclusive(self) -> None:
        with self._condition:
            if not self._exclusive:
                raise RuntimeError("release_exclusive without the exclusive hold")
            self._exclusive = False
            self._condition.notify_all()

    @contextmanager
    def shared(self, label: str = "judge") -> Iterator[None]:
        owner = object()
        self.acquire_shared(owner=owner, label=label)
        try:
            yield
        finally:
            self.release_shared(owner)

    def holders(self) -> tuple[int, bool]:
        """(shared holders, whether timing holds it): for tests and progress."""
        with self._condition:
            return self._shared, self._exclusive


class Hold:
    """One job's hold on a gate, moved between shared, exclusive and none."""

    def __init__(self, gate: GpuGate, give_up: GiveUp | None = None, label: str = "other") -> None:
        self.gate = gate
        self.give_up = give_up
        self.label = label
        self.state = "none"
        # What the holder is doing, for a timing that waits long on it (set by its owner)
        self.about: Callable[[], str] | None = None
        # Who held the GPU while the last exclusive hold was waited for: {label: seconds}.
        self.waited_on: dict[str, float] = {}
        # Told whether the GPU is held alone, each time that changes (set by its owner)
        self.on_exclusive: Callable[[bool], None] | None = None

    def shared(self) -> None:
        self.release()
        self.gate.acquire_shared(self.give_up, self, self.label)
        self.state = "shared"

    def exclusive(self, urgent: bool | Callable[[], bool] = True) -> None:
        self.release()
        self.waited_on = self.gate.acquire_exclusive(self.give_up, urgent)
        self._set("exclusive")

    def downgrade(self) -> None:
        """Exclusive to shared at once (GpuGate.downgrade); any other state: `shared()`."""
        if self.state != "exclusive":
            self.shared()
            return
        self.gate.downgrade(self, self.label)
        self._set("shared")

    def release(self) -> None:
        if self.state == "shared":
            self.gate.release_shared(self)
        elif self.state == "exclusive":
            self.gate.release_exclusive()
        self._set("none")

    def _set(self, state: str) -> None:
        was = self.state == "exclusive"
        self.state = state
        if self.on_exclusive is not None and was != (state == "exclusive"):
            self.on_exclusive(state == "exclusive")


def gate_for(device: str, gpu_index: int | None) -> GpuGate:
    """The process-wide gate of one GPU (the CPU has one too, for uniform code)."""
    key = f"{device}:{gpu_index or 0}"
    with _gates_lock:
        if key not in _gates:
            _gates[key] = GpuGate()
        return _gates[key]
