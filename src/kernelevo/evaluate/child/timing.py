"""Timing of several contestants, interleaved in one process, by three measures.

- gpu: the device time of one call, start event to end event, with the host's
  launch overhead hidden as it is in a stream of queued calls, a CUDA graph or
  torch.compile's graphs: a short sleep kernel holds the stream while the host
  queues the call. An L2 flush (twice the device's L2) precedes every sample,
  input sets rotate through fixed buffers, the whole device is synchronised
  around each sample and the median and IQR are reported. This is what
  `triton.testing.do_bench` measures.
- call: host time per call of a back-to-back loop of calls, launch overhead
  included, caches warm as in a real loop; what a Python caller waits.
- kernelbench: KernelBench's harness protocol (256 MB cache clear, events
  around a call made right after it, mean of 100 trials), so results compare
  with numbers published under it.
Samples of every contestant interleave, so drift affects all alike. Without a GPU
(tests on the CPU) the same loops run by the host's clock (`samplers.HostSampler`);
verdicts still report timings there as unavailable. Every
input set rotates through the timed calls, the stress set too (its outputs
are checked as well), but only the sets of the task's own distribution make
the statistics: a reference can take twice as long on rescaled values
(eager softmax on an H200), which would read as spread, not as its time.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator, Sequence

import torch

from kernelevo.config import TimingConfig
from kernelevo.evaluate.child import host_speed
from kernelevo.evaluate.child.launch_check import LaunchCount, count_own_launches
from kernelevo.evaluate.child.samplers import MAX_HOLD_MS, HostSampler, Load, Sampler
from kernelevo.evaluate.verdict import TimingStats

Contestant = Callable[..., Any]
# (contestant, measure, set, output) -> a problem that ends that contestant's
# timing at once (its outputs are already wrong), or None
AfterSample = Callable[[str, str, int, Any], "str | None"]
# Entered around the call measure's rounds: the judge's other jobs stand still
# meanwhile (sandbox/quiet.py); it gives how many do.
Quiet = Callable[[], ContextManager[int]]


@dataclass
class TimingRun:
    """Stats per measure and contestant plus what the caller should know about them."""

    measures: dict[str, dict[str, TimingStats]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    # contestants whose timing ended early, with why (wrong outputs, skipped work)
    dropped: dict[str, str] = field(default_factory=dict)
    # own launches per call, counted apart from the timed calls (launch_check.py)
    launches: dict[str, dict[str, float]] = field(default_factory=dict)
    # seconds of each step: warm-up, then one per measure
    seconds: dict[str, float] = field(default_factory=dict)
    # contestants sampled briefly: name -> (gpu samples, call loops) at most
    brief: dict[str, tuple[int, int]] = field(default_factory=dict)
    # by measure and contestant: round index -> time on a counted set, so two
    # contestants' times of one round (adjacent in time) can be paired
    rounds: dict[str, dict[str, dict[int, float]]] = field(default_factory=dict)
    # the call measure's host probe before each round (us), and its launch-bound
    # contestants (host_speed.py)
    host_us: list[float] = field(default_factory=list)
    launch_bound: list[str] = field(default_factory=list)

    def enough(self, name: str, measure: int, samples: list[tuple[int, float]],
               rotation: "_Rotation") -> bool:
        """Whether a brief contestant has its samples of a measure (0 gpu, 1 call) already."""
        cap = self.brief.get(name)
        return cap is not None and len(rotation.split(samples)[0]) >= cap[measure]

    def drop(self, calls: dict[str, Any], name: str, problem: str | None) -> None:
        """End `name`'s timing when `problem` is given: no more samples, no stats."""
        if problem and name in calls:
            del calls[name]
            self.dropped[name] = problem

    def keep_round(self, measure: str, name: str, index: int, set_index: int, ms: float,
                   rotation: "_Rotation") -> None:
        if set_index in rotation.counted:
            self.rounds.setdefault(measure, {}).setdefault(name, {})[index] = ms

    def as_json(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The stats as plain dictionaries, for a message: measure -> contestant -> fields."""
        return {measure: {name: vars(stats) for name, stats in by_name.items()}
                for measure, by_name in self.measures.items()}


# The least a speedup's interval spans either side of it: plain_timing.py's own
# runs of one pair, each a fresh process minutes apart, spread 5.0 % (max / min)
# at the median over 264 recorded rows (H100s, sessions 21-28); replayed on those
# tables, 5 % either side holds plain's median in 78 % of call rows against 66 %
# at 3 % (bench/floor_replay.py, bench/RESULTS.md "Speedups users can reproduce").
RANGE_FLOOR = 0.05


def speedup_range(baseline: TimingStats, own: TimingStats,
                  baseline_rounds: dict[int, float] | None = None,
                  own_rounds: dict[int, float] | None = None) -> list[float]:
    """[low, high] of the speedup baseline/own that a rerun can show.

    From rounds timed together (each round times both, adjacent in time):
    the middle half of the round-by-round speedups. Without such rounds (a
    stored baseline), from each contestant's own quartiles. Never narrower
    than RANGE_FLOOR either side of the speedup of the medians.
    """
    point = baseline.median_ms / own.median_ms
    common = sorted(set(baseline_rounds or {}) & set(own_rounds or {}))
    if len(common) >= 4:
        assert baseline_rounds is not None and own_rounds is not None
        ratios = [baseline_rounds[r] / own_rounds[r] for r in common]
        low, _, high = statistics.quantiles(ratios, n=4)
    else:
        half_b = baseline.iqr_ms / (2 * baseline.median_ms)
        half_o = own.iqr_ms / (2 * own.median_ms)
        low = point * max(1 - half_b, 0.0) / (1 + half_o)
        high = point * (1 + half_b) / max(1 - half_o, 1e-9)
    return [min(low, point / (1 + RANGE_FLOOR)), max(high, point * (1 + RANGE_FLOOR))]


def summarize(samples_ms: list[float], method: str) -> TimingStats:
    ordered = sorted(samples_ms)
    if len(ordered) >= 4:
        quartiles = statistics.quantiles(ordered, n=4)
        iqr = quartiles[2] - quartiles[0]
    else:
        iqr = ordered[-1] - ordered[0]
    return TimingStats(statistics.median(ordered), iqr, ordered[0], len(ordered), method,
                       statistics.fmean(ordered))


# A contestant this much slower or faster on the stress set than on the
# task's own sets is named in a note: its time depends on the values.
_STRESS_NOTE_RATIO = 1.25


class _Rotation:
    """Which input set each round uses, and which rounds count in the statistics."""

    def __init__(self, set_count: int, counted: Sequence[int] | None) -> None:
        self.set_count = set_count
        self.counted = sorted(set(counted)) if counted else list(range(set_count))
        if not set(self.counted) <= set(range(set_count)):
            raise ValueError(f"counted sets {self.counted} outside 0..{set_count - 1}")

    def set_of(self, round_index: int) -> int:
        return round_index % self.set_count

    def rounds(self, wanted: int, at_least: int) -> int:
        """`wanted` rounds, more if fewer than `at_least` of them would count."""
        total = wanted
        while sum(self.set_of(i) in self.counted for i in range(total)) < at_least:
            total += 1
        return total

    def split(self, samples: list[tuple[int, float]]) -> tuple[list[float], list[float]]:
        """(times on counted sets, times on the others) of (set, time) samples."""
        mine = [t for s, t in samples if s in self.counted]
        return mine, [t for s, t in samples if s not in self.counted]


def stress_note(name: str, counted_ms: list[float], other_ms: list[float]) -> str | None:
    """A note when a contestant's time on the uncounted (stress) set differs by 25 % or more."""
    if not counted_ms or not other_ms:
        return None
    ratio = statistics.median(other_ms) / max(statistics.median(counted_ms), 1e-9)
    if 1 / _STRESS_NOTE_RATIO < ratio < _STRESS_NOTE_RATIO:
        return None
    return (f"{name}: {ratio:.2f}x its time on the stress set (rescaled values) against the "
            "task's own sets; its time counts the task's own sets only")


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


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


def _warm(call: Callable[[], Any], warmup_ms: float) -> tuple[float, float]:
    """Run until warmup_ms have passed (at least 3 calls); (ms per call, host ms to queue one)."""
    calls, started, queue_ms = 0, time.perf_counter(), []
    while calls < 3 or (time.perf_counter() - started) * 1e3 < warmup_ms:
        before = time.perf_counter()
        call()
        queue_ms.append((time.perf_counter() - before) * 1e3)
        _synchronize()
        calls += 1
    return (time.perf_counter() - started) * 1e3 / calls, statistics.median(queue_ms)


def _per_call(warmed: tuple[float, float], share: int) -> tuple[float, float]:
    """(ms per call of the task, host ms to queue one invocation) of a warm-up."""
    return warmed[0] / share, warmed[1]


def _on_arena(fn: Contestant, arena: list[Any]) -> Callable[[], Any]:
    """fn called on the arena's inputs."""
    return lambda: fn(*arena)


def _replaying(replay: Callable[[], Any], output: Any) -> Callable[[], Any]:
    """A graph replay that returns the graph's static output."""
    return lambda: (replay(), output)[1]


def _calls(contestants: dict[str, Contestant], arena: list[Any], config: TimingConfig,
           run: TimingRun) -> tuple[dict[str, Callable[[], Any]], set[str]]:
    """A zero-argument call per contestant (a graph replay with cuda_graph on)."""
    calls: dict[str, Callable[[], Any]] = {}
    graphed: set[str] = set()
    for name, fn in contestants.items():
        calls[name] = _on_arena(fn, arena)
        if config.cuda_graph:
            try:
                replay, static_output = _graphed(fn, arena)
                calls[name] = _replaying(replay, static_output)
                graphed.add(name)
            except Exception as exc:  # capture is optional: say so and time plainly
                run.notes.append(f"{name}: CUDA graph capture failed ({type(exc).__name__}); "
                                 "timed without graphs")
    return calls, graphed


def _rotated(names: list[str], index: int) -> list[str]:
    """The order of one round: rotated so no contestant always follows the same one."""
    shift = index % len(names)
    return names[shift:] + names[:shift]


def time_contestants(contestants: dict[str, Contestant], sets: list[list[Any]],
                     config: TimingConfig, after: AfterSample,
                     counted: Sequence[int] | None = None,
                     launches: LaunchCount | None = None,
                     brief: dict[str, tuple[int, int]] | None = None,
                     load: Load | None = None,
                     unhooked: Callable[[], ContextManager[Any]] | None = None,
                     quiet: Quiet | None = None) -> TimingRun:
    """Every measure of every contestant; `after(name, measure, set, output)` sees outputs.

    `counted`: the sets whose times make the statistics (the task's own
    distribution; all when None). The others rotate through the calls too.
    A contestant whose output `after` calls wrong is timed no further.
    `launches` counts own kernel launches, so a caller can tell work skipped
    in a loop of calls (an output cached on the unchanged inputs) from work
    done; they are counted in a few untimed calls after the timing
    (launch_check.py), and `unhooked()` takes the counting hook off the
    launch path for the timed calls.
    `brief`: contestants timed with at most (gpu samples, call loops) on the
    counted sets, interleaved with the others' first rounds (a drift probe).
    `load(i)`, when given, makes set i current in place of copying it into
    the arena: `sets` are then empty lists and contestants take no arguments
    (timing_backward.py keeps a graph per set that way).
    `quiet()` is entered around the call measure.
    """
    run = TimingRun()
    run.brief = dict(brief or {})
    # a contestant that makes several calls of the task per invocation (the
    # compile baseline inside a compiled model) is timed per call of the task
    shares = {name: getattr(fn, "calls_per_invocation", 1) for name, fn in contestants.items()}
    rotation = _Rotation(len(sets), counted)
    arena = [x.clone() if isinstance(x, torch.Tensor) else x for x in sets[0]]
    sampler = (Sampler if torch.cuda.is_available() else HostSampler)(arena, sets, load)
    with (unhooked or contextlib.nullcontext)():  # warm-up too: it sizes the loops
        started = time.perf_counter()
        calls, graphed = _calls(contestants, arena, config, run)
        warm = {name: _per_call(_warm(call, config.warmup_ms), shares[name])
                for name, call in calls.items()}
        sampler.shares = shares
        run.seconds["warm"] = time.perf_counter() - started
        _measure(calls, warm, graphed, sampler, rotation, config, after, run, quiet)
    if launches is not None:
        run.launches = count_own_launches(calls, lambda: sampler.load(rotation.counted[0]),
                                          launches)
    return run


def _measure(calls: dict[str, Callable[[], Any]], warm: dict[str, tuple[float, float]],
             graphed: set[str], sampler: Any, rotation: "_Rotation", config: TimingConfig,
             after: AfterSample, run: TimingRun, quiet: Quiet | None = None) -> None:
    """Every measure, one after another, into `run`."""
    # As timeit does: a collection of this process's many objects (torch,
    # inductor) would land on whichever call happens to trigger it.
    collecting = gc.isenabled()
    gc.disable()
    try:
        started = time.perf_counter()
        run.measures["gpu"] = _gpu_time(calls, warm, graphed, sampler, rotation, config,
                                        after, run)
        run.seconds["gpu"], started = time.perf_counter() - started, time.perf_counter()
        run.launch_bound = [name for name in calls if host_speed.launch_bound(
            warm[name][0] * sampler.shares.get(name, 1), warm[name][1])]
        # host time is what a call measures where the host is the bottleneck: the
        # machine as quiet as a plain process's while calls are timed (whether a
        # call is launch-bound is itself a host reading: 20 us calls fell either side)
        with (quiet or _nobody_held)():
            run.measures["call"] = _call_time(calls, warm, sampler, rotation, config, after,
                                              run)
        run.seconds["call"], started = time.perf_counter() - started, time.perf_counter()
        if config.measure == "kernelbench":
            run.measures["kernelbench"] = _kernelbench_time(calls, sampler, rotation, after,
                                                            run)
            run.seconds["kernelbench"] = time.perf_counter() - started
    finally:
        if collecting:
            gc.enable()


@contextlib.contextmanager
def _nobody_held() -> Iterator[int]:
    yield 0


def _gpu_time(calls: dict[str, Callable[[], Any]], warm: dict[str, tuple[float, float]],
              graphed: set[str], sampler: Any, rotation: _Rotation,
              config: TimingConfig, after: AfterSample, run: TimingRun) -> dict[str, TimingStats]:
    slowest = max(per_call for per_call, _ in warm.values())
    count = int(min(config.max_samples, max(config.min_samples, config.target_ms / slowest)))
    # Twice the host's queueing time, so the call is queued before the sleep ends.
    hold_ms = {name: min(0.05 + 2 * queue_ms, MAX_HOLD_MS) for name, (_, queue_ms) in warm.items()}
    events: dict[str, list[tuple[int, float]]] = {name: [] for name in calls}
    # (round, set, event ms, tail ms) of every sample
    taken: dict[str, list[tuple[int, int, float, float]]] = {name: [] for name in calls}
    rounds = rotation.rounds(count, config.min_samples)
    # Every set once at least (the stress set's outputs are checked too), and
    # min_samples on the counted ones, before the precision may end the rounds.
    fewest = max(rotation.rounds(config.min_samples, config.min_samples), rotation.set_count)
    for index in range(rounds):
        set_index = rotation.set_of(index)
        for name in _rotated(list(calls), index):
            if name not in calls or run.enough(name, 0, events[name], rotation):
                continue
            event_ms, tail_ms, output = sampler.sample(calls[name], set_index, hold_ms[name])
            share = sampler.shares.get(name, 1)
            event_ms, tail_ms = event_ms / share, tail_ms / share
            events[name].append((set_index, event_ms))
            taken[name].append((index, set_index, event_ms, tail_ms))
            run.drop(calls, name, after(name, "gpu", set_index, output))
        if index + 1 >= fewest and index + 1 < rounds and precise(
                [rotation.split(events[name])[0] for name in calls if name not in run.brief],
                config.gpu_precision):
            break  # each contestant's sample count is in its stats (n)
    if sampler.retaken or sampler.late:
        run.notes.append(
            f"gpu time: {sampler.retaken} sample(s) taken again with a longer hold (the host "
            "queued the call after the stream's hold had ended)"
            + (f"; {sampler.late} still late (a call that waits for the device, or a host "
               "that slow): their times may hold host time" if sampler.late else ""))
    counted = {name: [sample for sample in taken[name] if sample[1] in rotation.counted]
               for name in calls}
    floor_ms = host_tail_ms({name: [tail for *_, tail in samples]
                             for name, samples in counted.items()})
    stats = {}
    for name in calls:
        counted_events, other_events = rotation.split(events[name])
        note = stress_note(name, counted_events, other_events)
        if note:
            run.notes.append(note)
        stats[name], per_sample = _choose(name, [event for *_, event, _ in counted[name]],
                                          [tail for *_, tail in counted[name]], floor_ms,
                                          "cuda_graph" if name in graphed else "events", run)
        for (index, set_index, _, _), ms in zip(counted[name], per_sample):
            run.keep_round("gpu", name, index, set_index, ms, rotation)
    return stats


# The median's 95 % notch (McGill, Tukey and Larsen 1978): median +- 1.57 IQR / sqrt(n).
_NOTCH = 1.57


def precise(samples: list[list[float]], within: float) -> bool:
    """Whether every list's median is known within `within` of it (its 95 % notch)."""
    if within <= 0 or not samples:
        return False
    for times in samples:
        if len(times) < 4:
            return False
        low, median, high = statistics.quantiles(times, n=4)
        if _NOTCH * (high - low) / math.sqrt(len(times)) > within * median:
            return False
    return True


def host_tail_ms(tails_ms: dict[str, list[float]]) -> float:
    """The part of every contestant's tail that is the host's, not the device's work.

    A sample's tail runs from its end event to a point recorded once the host
    is back from synchronising the device: the host's own delay (waking from
    the synchronise, recording) lands in every contestant's tail alike, and
    can outlast a short call's own time. The smallest median tail among the
    contestants timed together is taken as that delay; work a contestant
    leaves running past its end event shows as tail beyond it. With one
    contestant there is nothing to tell the two apart: none is taken off.
    """
    medians = [statistics.median(tails) for tails in tails_ms.values() if tails]
    return min(medians) if len(medians) > 1 else 0.0


def _call_time(calls: dict[str, Callable[[], Any]], warm: dict[str, tuple[float, float]],
               sampler: Any, rotation: _Rotation, config: TimingConfig,
               after: AfterSample, run: TimingRun) -> dict[str, TimingStats]:
    """Loops of back-to-back calls (at least 2 ms each), interleaved; median per call."""
    if not calls:
        return {}
    share = {name: sampler.shares.get(name, 1) for name in warm}
    per_loop = {name: int(min(1000, max(3, config.call_loop_ms / (per_call * share[name]))))
                for name, (per_call, _) in warm.items()}
    slowest_loop = max(per_loop[name] * warm[name][0] * share[name] for name in calls)
    loops = int(min(30, max(5, config.call_target_ms / slowest_loop)))
    samples: dict[str, list[tuple[int, float]]] = {name: [] for name in calls}
    for index in range(rotation.rounds(loops, 5)):
        set_index = rotation.set_of(index)
        run.host_us.append(host_speed.probe_us())
        for name in _rotated(list(calls), index):
            if name not in calls or run.enough(name, 1, samples[name], rotation):
                continue
            per_call_ms, output = sampler.loop(calls[name], set_index, per_loop[name])
            per_call_ms /= sampler.shares.get(name, 1)
            samples[name].append((set_index, per_call_ms))
            run.keep_round("call", name, index, set_index, per_call_ms, rotation)
            run.drop(calls, name, after(name, "call", set_index, output))
    return {name: summarize(rotation.split(samples[name])[0], "call_loop") for name in calls}


# KernelBench's harness: 3 warm-up calls, a 256 MB cache clear before each
# trial, 100 trials after one discarded, the mean reported.
_KERNELBENCH_TRIALS = 100
_KERNELBENCH_CLEAR_BYTES = 256 << 20


def _kernelbench_time(calls: dict[str, Callable[[], Any]], sampler: Any,
                      rotation: _Rotation, after: AfterSample,
                      run: TimingRun) -> dict[str, TimingStats]:
    """KernelBench's protocol on the task's own sets only (it times the task's inputs)."""
    clear = torch.empty(_KERNELBENCH_CLEAR_BYTES // 8, dtype=torch.int64, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for index in range(_KERNELBENCH_TRIALS + 1):
        set_index = rotation.counted[index % len(rotation.counted)]
        for name in _rotated(list(calls), index):
            if name not in calls or name in run.brief:  # a probe checks gpu and call only
                continue
            torch.cuda.synchronize()
            sampler.load(set_index)
            clear.fill_(42)
            start.record()
            output = calls[name]()
            end.record()
            torch.cuda.synchronize()
            if index:
                samples[name].append(start.elapsed_time(end) / sampler.shares.get(name, 1))
            run.drop(calls, name, after(name, "kernelbench", set_index, output))
    return {name: summarize(samples[name], "kernelbench") for name in calls if samples[name]}


def _choose(name: str, events_ms: list[float], tails_ms: list[float], floor_ms: float,
            method: str, run: TimingRun) -> tuple[TimingStats, list[float]]:
    """Stats and per-sample times: event time, plus the tail beyond the host's own
    (`floor_ms`, `host_tail_ms`) when work outlived the end event (side streams)."""
    beyond = [max(0.0, tail - floor_ms) for tail in tails_ms]
    event, tail = statistics.median(events_ms), statistics.median(beyond)
    if tail > 0.25 * event + 0.05:
        run.flags.append(f"{name}_work_after_end_event")
        run.notes.append(f"{name}: the device stayed busy {tail:.3f} ms after the end event "
                         f"(event time {event:.3f} ms; the host's own {floor_ms:.3f} ms left "
                         "out); timed up to device idle instead")
        timed = [e + t for e, t in zip(events_ms, beyond)]
        return summarize(timed, "events+tail"), timed
    return summarize(events_ms, method), events_ms
