"""bench/lane_peaks_replay.py: a second pass laid out with lanes sized from the first's peaks."""

from __future__ import annotations

from kernelevo.suite.footprint import CONTEXT_BYTES, LANE_PROCESSES
from tests.conftest import bench_module

GiB = 1 << 30


def test_the_sizes_from_the_first_pass_are_summed_over_the_second_pass_rows_spans():
    replay = bench_module("lane_peaks_replay")
    first = [{"task": "big", "reason": "passed",
              "gpu_peak_bytes": {"oracle": 10 * GiB, "worker": 20 * GiB, "recheck_worker": GiB}},
             {"task": "big", "reason": "passed", "gpu_peak_bytes": {"oracle": 12 * GiB}},
             {"task": "wrong", "reason": "output_mismatch",
              "gpu_peak_bytes": {"oracle": 99 * GiB}}]  # not a passing row: not kept
    assert replay.recorded_peaks(first) == {
        "big": {"oracle": 12 * GiB, "worker": 20 * GiB, "recheck_worker": GiB}}
    one_big = LANE_PROCESSES * CONTEXT_BYTES + 33 * GiB
    # three of the big task at once from 10 s to 20 s, one alone before and after
    second = [{"task": "big", "ended_s": 20.0, "wall_s": 20.0, "lane_bytes": 5 * GiB},
              {"task": "big", "ended_s": 20.0, "wall_s": 10.0, "lane_bytes": 5 * GiB,
               "judged_alone": True},
              {"task": "big", "ended_s": 30.0, "wall_s": 20.0, "lane_bytes": 5 * GiB},
              {"task": "wrong", "ended_s": 5.0, "wall_s": 5.0, "lane_bytes": GiB}]
    result = replay.replay(first, second, gpu_gib=79.0)
    assert result["peaks"]["most_gib"] == round(3 * one_big / GiB, 1)
    assert result["peaks"]["seconds_above"] == 10.0
    assert result["peaks"]["stretches_above_s"] == [[10.0, 20.0]]
    assert result["recorded_lane_bytes"]["seconds_above"] == 0.0  # 15 GiB at most
    assert result["judged_alone"] == [{"task": "big", "started_s": 10.0}]
