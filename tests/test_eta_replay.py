"""bench/eta_replay.py: a recorded pass's rows put back on their timeline."""

from __future__ import annotations

import json

from tests.conftest import bench_module


def _eta_replay():
    return bench_module("eta_replay")


def _pass(folder, rows, heads=(0.0, 2.0)):
    folder.mkdir()
    (folder / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    lanes = [{"lane": lane, "head_start_wait_s": head} for lane, head in enumerate(heads)]
    (folder / "suite.json").write_text(json.dumps({"time_spent": {"per_lane": lanes}}))
    return folder


def test_rows_without_end_times_are_laid_on_their_lanes_one_after_another(tmp_path):
    rows = [{"task": f"t{n}", "lane": n % 2, "wall_s": 10.0 + n} for n in range(6)]
    timeline, lanes = _eta_replay().timeline(_pass(tmp_path / "old", rows))
    assert lanes == 2
    # lane 0: 10, 10+12, 22+14; lane 1 from its head start of 2 s: 2+11, 13+13, 26+15
    assert [row["ended_s"] for row in timeline] == [10.0, 13.0, 22.0, 26.0, 36.0, 41.0]


def test_recorded_end_times_are_taken_as_they_are(tmp_path):
    rows = [{"task": "a", "lane": 0, "wall_s": 5.0, "ended_s": 30.0},
            {"task": "b", "lane": 1, "wall_s": 5.0, "ended_s": 12.5}]
    timeline, _ = _eta_replay().timeline(_pass(tmp_path / "new", rows))
    assert [(row["task"], row["ended_s"]) for row in timeline] == [("b", 12.5), ("a", 30.0)]
    result = _eta_replay().replay(_pass(tmp_path / "more", [
        {"task": f"t{n}", "lane": n % 2, "wall_s": 10.0, "ended_s": 10.0 * (n + 1)}
        for n in range(8)]))
    assert result["rows"] == 8 and result["points"]  # an estimate once rows past each lane's first
    assert all(point["left_s"] == 80.0 - 10.0 * round(point["done"] * 8)
               for point in result["points"])
