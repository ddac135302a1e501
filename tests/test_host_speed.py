"""The host's speed while calls are timed: probed each round, and a launch-bound pair's interval."""

from __future__ import annotations

import time

import pytest
import torch

from kernelevo.config import TimingConfig
from kernelevo.evaluate.child import host_speed
from kernelevo.evaluate.child.timing import RANGE_FLOOR, time_contestants
from kernelevo.evaluate.child.worker_timing import speedup_ranges
from kernelevo.evaluate.verdict import TimingStats


def _fields(median: float) -> dict:
    return vars(TimingStats(median, 0.01 * median, median, 10, "call_loop"))


def test_the_spread_is_the_probes_quartile_ratio_and_needs_four_probes() -> None:
    assert host_speed.spread([100.0, 100.0, 100.0]) == 0.0
    assert host_speed.spread([100.0] * 8) == 0.0
    # a host at two speeds, half the rounds each: its quartiles are the two speeds
    assert host_speed.spread([100.0] * 4 + [150.0] * 4) == pytest.approx(0.5, rel=0.05)


def test_a_launch_bound_call_is_one_whose_queueing_is_most_of_its_time() -> None:
    assert host_speed.launch_bound(0.020, 0.019)
    assert not host_speed.launch_bound(3.6, 0.030)  # a 3.6 ms convolution queued in 30 us
    assert not host_speed.launch_bound(0.0, 0.0)


def test_a_launch_bound_pairs_call_interval_spans_the_hosts_spread_and_no_other() -> None:
    measures = {"call": {"eager": _fields(2.0), "candidate_0": _fields(1.0)},
                "gpu": {"eager": _fields(2.0), "candidate_0": _fields(1.0)}}
    rounds = {m: {"eager": {r: 2.0 for r in range(8)}, "candidate_0": {r: 1.0 for r in range(8)}}
              for m in measures}
    steady = speedup_ranges(measures, rounds)
    noisy = speedup_ranges(measures, rounds, 0.25, ["candidate_0"])
    assert steady["0"]["call"]["eager"] == pytest.approx(
        [2.0 / (1 + RANGE_FLOOR), 2.0 * (1 + RANGE_FLOOR)], rel=1e-3)
    assert noisy["0"]["call"]["eager"] == pytest.approx([2.0 / 1.25, 2.5], rel=1e-3)
    # the gpu measure hides the host's launches: unchanged
    assert noisy["0"]["gpu"] == steady["0"]["gpu"]
    # neither contestant launch-bound (both wait on the GPU): unchanged too
    assert speedup_ranges(measures, rounds, 0.25, []) == steady
    # an interval already wider than the spread keeps its width
    assert host_speed.widened([1.0, 4.0], 2.0, 0.25) == [1.0, 4.0]


def test_the_note_names_a_spread_worth_saying_and_who_moves_with_it() -> None:
    assert host_speed.note(0.02, ["candidate_0"]) is None
    said = host_speed.note(0.3, ["eager", "candidate_0"])
    assert said is not None and "30%" in said and "eager, candidate_0" in said
    quiet = host_speed.note(0.3, [])
    assert quiet is not None and "no contestant is launch-bound" in quiet


def test_the_call_measure_probes_the_host_before_every_round() -> None:
    # on the CPU the calls are host time: both contestants are launch-bound
    def slow(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.0002)
        return x + 1

    def slower(x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.0004)
        return x * 2

    sets = [[torch.ones(8)] for _ in range(3)]
    config = TimingConfig(warmup_ms=50.0, call_loop_ms=1.0, call_target_ms=5.0)
    # Launch-bound compares a warm-up's mean time per call with its median host time to
    # queue one: on a machine busier than its cores (the CPU suite's lingering processes) one
    # late wake-up raises the mean alone (seen once in a full CPU run). Such a run is taken
    # again, up to 3 times.
    bound: list[list[str]] = []
    for _ in range(3):
        with torch.no_grad():
            run = time_contestants({"eager": slow, "candidate_0": slower}, sets, config,
                                   lambda *_: None)
        calls = run.rounds["call"]
        assert len(run.host_us) >= max(max(calls["eager"]), max(calls["candidate_0"])) + 1
        assert all(value > 0 for value in run.host_us)
        bound.append(sorted(run.launch_bound))
        if bound[-1] == ["candidate_0", "eager"]:
            break
    assert bound[-1] == ["candidate_0", "eager"], bound


def test_a_verdict_gives_the_host_probes_median_so_runs_can_be_compared() -> None:
    from types import SimpleNamespace

    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.parent import outcome
    from kernelevo.evaluate.shared.messages import Timing

    judge = SimpleNamespace(device="cuda", config=EvalConfig())
    said = outcome._environment(judge, Timing(measures={}, host_spread=0.12, host_us=912.4))
    assert said["host_probe_us"] == "912" and said["host_speed_spread"] == "12.0%"
    assert "host_probe_us" not in outcome._environment(judge, Timing(measures={}))
    decoded = Timing.from_json(Timing(measures={}, host_us=912.4).to_json())
    assert decoded.host_us == pytest.approx(912.4)  # it crosses the pipe
