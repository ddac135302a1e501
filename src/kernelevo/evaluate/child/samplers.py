"""How one call of a contestant is sampled: on the GPU by events, without one by the host's clock.

timing.py interleaves the contestants and makes the statistics; a sampler
loads an input set into the arena and times one call (`sample`, the gpu
measure: the stream held by a sleep kernel while the host queues the call,
the L2 flushed right before it) or a loop of back-to-back calls (`loop`, the
call measure).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch


def load_set(arena: list[Any], source: list[Any]) -> None:
    for target, value in zip(arena, source):
        if isinstance(target, torch.Tensor):
            target.copy_(value)


class Sleeper:
    """Holds the stream busy for a given time, so the host can queue a call ahead of it.

    `torch.cuda._sleep` spins for a number of SM clock cycles, so a hold is
    only as long as asked at the clock it was calibrated at. An idle GPU
    runs at a fraction of its boost clock and speeds up within milliseconds
    of work: a calibration taken then would make every later hold several
    times shorter than asked. The calibration runs after a spin that wakes
    the clock and keeps the fastest of three, so a hold errs long.
    """

    def __init__(self) -> None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)  # the first launch loads the kernel
        torch.cuda._sleep(20_000_000)  # 10-60 ms: the clock is up before it ends
        rates = []
        for _ in range(3):
            start.record()
            torch.cuda._sleep(1_000_000)
            end.record()
            end.synchronize()
            rates.append(1_000_000 / max(start.elapsed_time(end), 1e-3))
        self.cycles_per_ms = max(rates)

    def sleep(self, ms: float) -> None:
        torch.cuda._sleep(int(self.cycles_per_ms * ms))


# A sample whose call the host queued more slowly than the stream slept is taken
# again, with a hold of twice the host's time, at most this many times.
RETAKES = 2
MAX_HOLD_MS = 20.0  # longer holds waste device time; a call that needs more is host-bound

Load = Callable[[int], None]  # makes input set i the one the next calls use


class Sampler:
    """Times one call of one contestant at a time on the current device."""

    def __init__(self, arena: list[Any], sets: list[list[Any]], load: Load | None = None) -> None:
        l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
        self.flush = torch.empty(max(2 * l2_bytes, 1 << 20), dtype=torch.int8, device="cuda")
        self.arena, self.sets = arena, sets
        self.load = load or (lambda set_index: load_set(self.arena, self.sets[set_index]))
        self.shares: dict[str, int] = {}  # calls of the task per invocation, when not 1
        self.sleeper = Sleeper()
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.settled = torch.cuda.Event(enable_timing=True)
        self.asleep = torch.cuda.Event(enable_timing=True)
        self.awake = torch.cuda.Event(enable_timing=True)
        self.retaken = self.late = 0  # samples taken again with a longer hold; never fitted
        self.waiting: set[int] = set()  # calls late after their retakes (by id): no more

    def sample(self, call: Callable[[], Any], set_index: int,
               hold_ms: float) -> tuple[float, float, Any]:
        """(event_ms, tail_ms, output) of one call after loading a set and flushing L2.

        The stream sleeps `hold_ms` (longer than the host needs to queue the
        call) before the start event, so the event interval holds the call's
        device work and not the host's launch overhead. `tail_ms` runs from
        the end event to a point recorded after synchronising the whole
        device: work left running on other streams makes it long.

        A call the host took longer to queue than the stream slept (a slow
        call among quick ones, a thread woken late) may have left the device
        waiting inside the interval: that sample is taken again with a hold
        of twice the host's time, up to `RETAKES` times, and counted in
        `retaken`; one that never fitted is counted in `late`. A call still
        late after its retakes waits for the device (it synchronises) or its
        host is that slow: its later samples are taken once each, and late.
        """
        retakes = 0 if id(call) in self.waiting else RETAKES
        for attempt in range(retakes + 1):
            event_ms, tail_ms, output, queued_ms, held_ms = self._sample(call, set_index,
                                                                         hold_ms)
            if queued_ms <= held_ms:
                break
            if attempt == retakes:
                self.late += 1
                self.waiting.add(id(call))
                break
            self.retaken += 1
            hold_ms = min(2 * queued_ms + 0.05, MAX_HOLD_MS)
        return event_ms, tail_ms, output

    def _sample(self, call: Callable[[], Any], set_index: int,
                hold_ms: float) -> tuple[float, float, Any, float, float]:
        """One try: (event_ms, tail_ms, output, host ms to queue it, device ms of the hold)."""
        torch.cuda.synchronize()
        self.load(set_index)
        queued_from = time.perf_counter()  # the device meets `asleep` no earlier than this
        self.asleep.record()
        self.sleeper.sleep(hold_ms)
        self.awake.record()
        # Right before the call, as do_bench flushes: the call meets an L2 full
        # of another buffer's dirty lines.
        self.flush.zero_()
        self.start.record()
        output = call()
        self.end.record()
        queued_ms = (time.perf_counter() - queued_from) * 1e3
        torch.cuda.synchronize()
        self.settled.record()
        self.settled.synchronize()
        return (self.start.elapsed_time(self.end), self.end.elapsed_time(self.settled), output,
                queued_ms, self.asleep.elapsed_time(self.awake))

    def loop(self, call: Callable[[], Any], set_index: int, calls: int) -> tuple[float, Any]:
        """(ms per call, last output) of `calls` back-to-back calls, by the host's clock."""
        self.load(set_index)
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(calls):
            output = call()
        torch.cuda.synchronize()
        return (time.perf_counter() - started) * 1e3 / calls, output


class HostSampler:
    """The sampler by the host's clock, where there is no GPU: no flush, no events, no tail."""

    def __init__(self, arena: list[Any], sets: list[list[Any]], load: Load | None = None) -> None:
        self.arena, self.sets = arena, sets
        self.load = load or (lambda set_index: load_set(self.arena, self.sets[set_index]))
        self.shares: dict[str, int] = {}
        self.retaken = self.late = 0  # the GPU sampler's counts; the host's clock has no hold

    def sample(self, call: Callable[[], Any], set_index: int,
               hold_ms: float) -> tuple[float, float, Any]:
        self.load(set_index)
        started = time.perf_counter()
        output = call()
        return (time.perf_counter() - started) * 1e3, 0.0, output

    def loop(self, call: Callable[[], Any], set_index: int, calls: int) -> tuple[float, Any]:
        self.load(set_index)
        started = time.perf_counter()
        for _ in range(calls):
            output = call()
        return (time.perf_counter() - started) * 1e3 / calls, output
