"""Timing of several contestants, interleaved in one process.

Modelled on careful benchmarking practice: warm-up first, an L2 flush with a
buffer twice the device's L2 before every sample, the whole device
synchronised around each sample, input sets rotated through fixed buffers so
a cache keyed on pointers returns stale results (which the caller then
catches), the median and IQR reported, and a settle time after each sample to expose
work the stream's events cannot see.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from kernelevo.evaluate.verdict import TimingStats

Contestant = Callable[..., Any]
AfterSample = Callable[[str, int, int, Any], None]


@dataclass
class TimingRun:
    """Stats per contestant plus what the caller should know about them."""

    stats: dict[str, TimingStats] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)


def summarize(samples_ms: list[float], method: str) -> TimingStats:
    ordered = sorted(samples_ms)
    if len(ordered) >= 4:
        quartiles = statistics.quantiles(ordered, n=4)
        iqr = quartiles[2] - quartiles[0]
    else:
        iqr = ordered[-1] - ordered[0]
    return TimingStats(statistics.median(ordered), iqr, ordered[0], len(ordered), method)


def load_set(arena: list[Any], source: list[Any]) -> None:
    for target, value in zip(arena, source):
        if isinstance(target, torch.Tensor):
            target.copy_(value)


class _Sampler:
    """Times one call of one contestant at a time on the current device."""

    def __init__(self, arena: list[Any], sets: list[list[Any]]) -> None:
        l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
        self.flush = torch.empty(max(2 * l2_bytes, 1 << 20), dtype=torch.int8, device="cuda")
        self.arena, self.sets = arena, sets
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.settled = torch.cuda.Event(enable_timing=True)

    def sample(self, call: Callable[[], Any], set_index: int) -> tuple[float, float, Any]:
        """(event_ms, tail_ms, output) of one call after loading a set and flushing L2.

        The device is idle before the set is loaded; the load and the flush are
        queued ahead of the timed call, so the host's launch overhead hides
        behind them as it does in a stream of real calls. `tail_ms` runs from
        the end event to a point recorded after synchronising the whole device:
        work left running on other streams makes it long.
        """
        torch.cuda.synchronize()
        load_set(self.arena, self.sets[set_index])
        self.flush.zero_()
        self.start.record()
        output = call()
        self.end.record()
        torch.cuda.synchronize()
        self.settled.record()
        self.settled.synchronize()
        return self.start.elapsed_time(self.end), self.end.elapsed_time(self.settled), output


def _graphed(fn: Contestant, arena: list[Any]) -> tuple[Callable[[], Any], Any]:
    """Capture one call in a CUDA graph; returns (replay, static output)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(*arena)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_output = fn(*arena)
    return graph.replay, static_output


def _warm(call: Callable[[], Any], warmup_ms: float) -> float:
    """Run until warmup_ms have passed (at least 3 calls); returns ms per call."""
    calls, started = 0, time.perf_counter()
    while calls < 3 or (time.perf_counter() - started) * 1e3 < warmup_ms:
        call()
        torch.cuda.synchronize()
        calls += 1
    return (time.perf_counter() - started) * 1e3 / calls


def time_contestants(contestants: dict[str, Contestant], sets: list[list[Any]],
                     config: Any, after: AfterSample) -> TimingRun:
    """Interleave samples of every contestant; `after(name, sample, set, output)` sees each output."""
    run = TimingRun()
    arena = [x.clone() if isinstance(x, torch.Tensor) else x for x in sets[0]]
    sampler = _Sampler(arena, sets)
    calls: dict[str, Callable[[], Any]] = {}
    graph_outputs: dict[str, Any] = {}
    per_call_ms = {}
    for name, fn in contestants.items():
        calls[name] = lambda fn=fn: fn(*arena)
        if config.cuda_graph:
            try:
                replay, graph_outputs[name] = _graphed(fn, arena)
                calls[name] = lambda replay=replay, name=name: (replay(), graph_outputs[name])[1]
            except Exception as exc:  # capture is optional: say so and time plainly
                run.notes.append(f"{name}: CUDA graph capture failed ({type(exc).__name__}); "
                                 "timed without graphs")
        per_call_ms[name] = _warm(calls[name], config.warmup_ms)
    slowest = max(per_call_ms.values())
    count = int(min(config.max_samples, max(config.min_samples, config.target_ms / slowest)))
    events: dict[str, list[float]] = {name: [] for name in contestants}
    tails: dict[str, list[float]] = {name: [] for name in contestants}
    names = list(contestants)
    for index in range(count):
        set_index = index % len(sets)
        # Rotate the order so no contestant always follows the same one.
        for name in names[index % len(names):] + names[: index % len(names)]:
            event_ms, tail_ms, output = sampler.sample(calls[name], set_index)
            events[name].append(event_ms)
            tails[name].append(tail_ms)
            after(name, index, set_index, output)
    for name in names:
        method = "cuda_graph" if name in graph_outputs else "events"
        run.stats[name] = _choose(name, events[name], tails[name], method, run)
    return run


def _choose(name: str, events_ms: list[float], tails_ms: list[float], method: str,
            run: TimingRun) -> TimingStats:
    """Event time, plus the tail when work outlived the end event (side streams)."""
    event, tail = statistics.median(events_ms), statistics.median(tails_ms)
    if tail > 0.25 * event + 0.05:
        run.flags.append(f"{name}_work_after_end_event")
        run.notes.append(f"{name}: the device stayed busy {tail:.3f} ms after the end event "
                         f"(event time {event:.3f} ms); timed up to device idle instead")
        return summarize([e + t for e, t in zip(events_ms, tails_ms)], "events+tail")
    return summarize(events_ms, method)
