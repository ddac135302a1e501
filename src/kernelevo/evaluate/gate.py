"""Who may use a GPU at once: timing alone, everything else side by side.

Several evaluations can share one GPU (pipelining): their oracles, their
workers' warm-up and their correctness checks overlap. Timing must not: a
candidate timed while another process runs kernels on the same GPU reads
slower. Each GPU has one `GpuGate`, a readers-writer lock held by the judge
process on its children's behalf: shared for any GPU work, exclusive for a
timing phase. A waiting timing phase goes first: no new shared holder enters
while it waits, so timing never starves behind a stream of checks.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

_gates: dict[str, "GpuGate"] = {}
_gates_lock = threading.Lock()


class GpuGate:
    """A readers-writer lock with writer preference, for one GPU."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._writers_waiting = 0

    def acquire_shared(self) -> None:
        with self._condition:
            while self._exclusive or self._writers_waiting:
                self._condition.wait()
            self._shared += 1

    def release_shared(self) -> None:
        with self._condition:
            if self._shared <= 0:
                raise RuntimeError("release_shared without a shared hold")
            self._shared -= 1
            if not self._shared:
                self._condition.notify_all()

    def acquire_exclusive(self) -> None:
        with self._condition:
            self._writers_waiting += 1
            try:
                while self._exclusive or self._shared:
                    self._condition.wait()
            finally:
                self._writers_waiting -= 1
            self._exclusive = True

    def release_exclusive(self) -> None:
        with self._condition:
            if not self._exclusive:
                raise RuntimeError("release_exclusive without the exclusive hold")
            self._exclusive = False
            self._condition.notify_all()

    @contextmanager
    def shared(self) -> Iterator[None]:
        self.acquire_shared()
        try:
            yield
        finally:
            self.release_shared()

    def holders(self) -> tuple[int, bool]:
        """(shared holders, whether timing holds it): for tests and progress."""
        with self._condition:
            return self._shared, self._exclusive


class Hold:
    """One job's hold on a gate, moved between shared, exclusive and none."""

    def __init__(self, gate: GpuGate) -> None:
        self.gate = gate
        self.state = "none"

    def shared(self) -> None:
        self.release()
        self.gate.acquire_shared()
        self.state = "shared"

    def exclusive(self) -> None:
        self.release()
        self.gate.acquire_exclusive()
        self.state = "exclusive"

    def release(self) -> None:
        if self.state == "shared":
            self.gate.release_shared()
        elif self.state == "exclusive":
            self.gate.release_exclusive()
        self.state = "none"


def gate_for(device: str, gpu_index: int | None) -> GpuGate:
    """The process-wide gate of one GPU (the CPU has one too, for uniform code)."""
    key = f"{device}:{gpu_index or 0}"
    with _gates_lock:
        if key not in _gates:
            _gates[key] = GpuGate()
        return _gates[key]
