"""bench/suite_rows.py: what rows' processes held on the GPU, against their lane's estimate."""

from __future__ import annotations


from kernelevo.suite.footprint import LANE_MIN_BYTES, SESSIONS_WITH_DATA
from tests.conftest import bench_module

GIB = 1 << 30


def _suite_rows():
    return bench_module("suite_rows")


def _row(task: str, session_gib: int, oracle_gib: int, worker_gib: int) -> dict:
    return {"task": task, "lane_bytes": LANE_MIN_BYTES + SESSIONS_WITH_DATA * session_gib * GIB,
            "gpu_peak_bytes": {"oracle": oracle_gib * GIB, "worker": worker_gib * GIB}}


def test_peaks_are_set_against_one_sessions_share_of_the_estimate():
    rows = [_row("small", 4, 1, 1), _row("conv3d", 2, 3, 5), _row("middle", 4, 2, 2),
            {"task": "cpu", "lane_bytes": 0}, {"task": "untimed", "lane_bytes": GIB}]
    found = _suite_rows().memory(rows)
    assert found["rows_with_peaks"] == 3 and found["over_the_estimate"] == 1
    assert found["peaks_over_estimate_p10_p50_p90"] == [0.5, 1.0, 1.0]  # p90 of 3: the 2nd
    top = found["largest"][0]
    assert top["task"] == "conv3d" and top["ratio"] == 4.0
    assert top["peaks_gib"] == {"oracle": 3.0, "worker": 5.0} and top["estimate_gib"] == 2.0
    assert _suite_rows().memory([{"task": "cpu"}]) == {"rows_with_peaks": 0}


def test_a_rows_re_check_peaks_count_against_the_whole_lane_not_the_session():
    row = _row("conv3d", 2, 3, 5)
    row["gpu_peak_bytes"].update(recheck_oracle=2 * GIB, recheck_worker=2 * GIB)
    found = _suite_rows().memory([row, _row("small", 4, 1, 1)])
    assert found["largest"][0]["ratio"] == 4.0  # the evaluation's two against one session
    whole = (3 + 5 + 2 + 2) * GIB / row["lane_bytes"]
    assert found["with_recheck_over_lane_p10_p50_p90"] == [round(whole, 3)] * 3
    assert _suite_rows().memory([_row("small", 4, 1, 1)])["with_recheck_over_lane_p10_p50_p90"] \
        is None
