"""bench/cross_session.py: the same pairs' speedups on several machines, judge against plain."""

from __future__ import annotations

import json

import pytest

from tests.conftest import bench_module


def _table(path, judged):
    rows = [{"task": task, "measure": measure, "judge": judge, "interval": [low, high],
             "plain_median": plain, "inside": low <= plain <= high}
            for (task, measure), (judge, low, high, plain) in judged.items()]
    rows.append({"task": "untimed", "measure": "call", "judge": None, "interval": None,
                 "plain_median": None, "inside": None})
    path.write_text(json.dumps({"rows": rows}))
    return path


def test_spreads_and_hits_are_counted_over_the_rows_every_run_has(tmp_path):
    cross = bench_module("cross_session")
    first = _table(tmp_path / "a.json", {("t1", "call"): (1.00, 0.95, 1.05, 1.00),
                                         ("t2", "call"): (2.00, 1.90, 2.10, 1.50),
                                         ("t3", "gpu"): (1.00, 0.95, 1.05, 1.0)})
    second = _table(tmp_path / "b.json", {("t1", "call"): (1.04, 0.99, 1.09, 1.10),
                                          ("t2", "call"): (2.40, 2.28, 2.52, 1.80),
                                          ("only_here", "gpu"): (1.0, 0.9, 1.1, 1.0),
                                          ("t3", "gpu"): (1.00, 0.95, 1.05, 1.0)})
    summary = cross.compare([cross.load_rows(first), cross.load_rows(second)])
    assert summary["rows"] == 3  # only_here and the untimed row are left out
    call = summary["by_measure"]["call"]
    assert call["rows"] == 2
    # t1: 1.04 inside 0.95-1.05 and 1.00 inside 0.99-1.09; t2: 2.40 above 2.10, 2.00 below 2.28
    assert call["inside_another_runs_interval"] == [2, 4]
    assert call["judge_spread_p50_p90"][1] == pytest.approx(0.2)  # t2: 2.40 / 2.00
    assert call["plain_spread_p50_p90"][1] == pytest.approx(0.2)  # t2: 1.80 / 1.50
    assert call["judge_widest"] == {"task": "t2", "speedups": [2.0, 2.4]}
    assert summary["by_measure"]["gpu"]["inside_another_runs_interval"] == [2, 2]
