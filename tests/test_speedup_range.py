"""A speedup's interval: what a rerun can show, from rounds timed together or from quartiles."""

from __future__ import annotations

import os

import pytest

from kernelevo.evaluate.shared.cores import on_timing_core, timing_core, visible_gpu_ordinal
from kernelevo.evaluate.child.timing import RANGE_FLOOR, speedup_range
from kernelevo.evaluate.child.worker_timing import speedup_ranges
from kernelevo.evaluate.parent.compare import _decide
from kernelevo.evaluate.verdict import TimingStats, Verdict


def stats(median: float, iqr: float = 0.0) -> TimingStats:
    return TimingStats(median, iqr, median, 10, "call_loop")


def test_paired_rounds_give_the_middle_half_of_the_round_by_round_speedups() -> None:
    # eager slows down in rounds 4-7 and the candidate with it: paired, the speedup holds
    eager = {r: (2.0 if r < 4 else 3.0) for r in range(8)}
    own = {r: (1.0 if r < 4 else 1.5) for r in range(8)}
    low, high = speedup_range(stats(2.5, 1.0), stats(1.25, 0.5), eager, own)
    assert low == pytest.approx(2.0 / (1 + RANGE_FLOOR)) and high == pytest.approx(
        2.0 * (1 + RANGE_FLOOR))
    # unpaired (a stored baseline), the same quartiles make a much wider interval
    low_u, high_u = speedup_range(stats(2.5, 1.0), stats(1.25, 0.5))
    assert low_u < 1.5 and high_u > 2.9


def test_spread_rounds_widen_the_interval_past_the_floor() -> None:
    eager = dict(enumerate([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]))
    own = dict(enumerate([0.5, 0.6, 0.7, 0.8, 0.5, 0.6, 0.7, 0.8]))
    low, high = speedup_range(stats(1.0), stats(0.65), eager, own)
    assert low < 1.3 and high > 1.8
    assert low < 1.0 / 0.65 < high


def test_the_interval_always_holds_the_speedup_of_the_medians() -> None:
    # rounds that disagree with the medians (few, or skewed) never leave them outside
    eager = dict(enumerate([1.0] * 6))
    own = dict(enumerate([0.25] * 6))
    low, high = speedup_range(stats(1.0), stats(0.5), eager, own)
    assert low <= 2.0 <= high and high >= 4.0


def test_ranges_come_per_candidate_measure_and_baseline_and_pair_only_rounds_given() -> None:
    def fields(median: float) -> dict:
        return vars(stats(median, 0.02 * median))

    measures = {"call": {"eager": fields(2.0), "compile": fields(1.0),
                         "candidate_0": fields(1.0), "candidate_1": fields(4.0)}}
    rounds = {"call": {"eager": {r: 2.0 for r in range(6)},
                       "candidate_0": {r: 1.0 for r in range(6)}}}
    ranges = speedup_ranges(measures, rounds)
    assert set(ranges) == {"0", "1"} and set(ranges["0"]["call"]) == {"eager", "compile"}
    assert ranges["0"]["call"]["eager"] == pytest.approx(
        [2.0 / (1 + RANGE_FLOOR), 2.0 * (1 + RANGE_FLOOR)], rel=1e-3)
    low, high = ranges["1"]["call"]["eager"]
    assert low < 0.5 < high


def _timed(median: float, low: float, high: float) -> Verdict:
    return Verdict("ok", "passed", timings={"candidate": stats(median), "eager": stats(1.0)},
                   speedup_vs_eager=1.0 / median, timing_measure="call",
                   speedup_ranges={"call": {"eager": [low, high]}})


def test_compare_calls_overlapping_intervals_a_tie_and_separate_ones_a_difference() -> None:
    tie = _decide(_timed(0.50, 1.80, 2.20), _timed(0.52, 1.75, 2.05))
    assert tie.faster == "a" and not tie.significant
    clear = _decide(_timed(0.50, 1.90, 2.10), _timed(0.70, 1.35, 1.50))
    assert clear.faster == "a" and clear.significant


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
def test_timing_runs_on_one_core_and_returns_to_where_it_ran() -> None:
    before = os.sched_getaffinity(0)
    core = timing_core(0)
    if core is None:
        pytest.skip("a single allowed core")
    assert core == max(before) and timing_core(1) != core
    with on_timing_core(core) as used:
        assert used == core and os.sched_getaffinity(0) == {core}
    assert os.sched_getaffinity(0) == before
    assert visible_gpu_ordinal({"CUDA_VISIBLE_DEVICES": "3,1"}) == 3
    assert visible_gpu_ordinal({"CUDA_VISIBLE_DEVICES": "GPU-uuid"}) == 0


def test_the_compile_baseline_calls_the_task_on_every_set_inside_one_compiled_model() -> None:
    import torch

    from kernelevo.evaluate.child.baselines import CompiledInAModel, InAModel, model_calls

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    sets = [[torch.randn(4, 8)] for _ in range(4)]
    compiled = CompiledInAModel(torch.compile(InAModel(model), backend="eager"), sets[1:])
    assert compiled.calls_per_invocation == 4
    with torch.no_grad():
        outputs = compiled(*sets[0])
        assert len(outputs) == 4
        for inputs, output in zip(sets, outputs):
            assert torch.equal(output, model(*inputs))
        fresh = torch.randn(4, 8)  # the timed set changes between rounds: its output follows
        assert torch.equal(compiled(fresh)[0], model(fresh))
    assert model_calls(4, sets[0], "cpu") == 4 and model_calls(1, sets[0], "cuda") == 1
