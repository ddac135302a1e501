"""Reports of large runs stay small: a bounded table and a thinned status plot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelevo.report import write_report
from kernelevo.report.data import CandidateRow, load_run
from kernelevo.report.html import run_plots
from kernelevo.report.svg import STATUS_PLOT_STEPS, thin_timeline
from kernelevo.report.table import ROW_LIMIT, candidate_table
from tests.conftest import bench_module


def scale_run_module():
    return bench_module("scale_run")


@pytest.fixture(scope="module")
def large_run(tmp_path_factory) -> Path:
    return scale_run_module().generate(tmp_path_factory.mktemp("runs"), 3000)


def test_a_large_runs_report_stays_below_a_size_bound(large_run: Path) -> None:
    page = write_report(large_run, large_run / "report.html").read_text()
    assert len(page.encode()) < 800_000
    assert page.count("<tr>") < ROW_LIMIT + 100
    assert "of 3,000 candidates" in page


def test_a_large_runs_status_plot_has_at_most_the_bound_of_steps(large_run: Path) -> None:
    data = load_run(large_run)
    assert len(data.timeline) > 2 * STATUS_PLOT_STEPS
    plot = str(run_plots(data)["status"])
    assert int(re.search(r'data-points="(\d+)"', plot).group(1)) <= STATUS_PLOT_STEPS
    for points in re.findall(r'points="([^"]*)"', plot):
        assert len(points.split()) <= 4 * STATUS_PLOT_STEPS


def timeline_of(count: int) -> list[tuple[float, dict[str, int]]]:
    return [(index * 0.5, {"ok": index, "pending": index % 7}) for index in range(count)]


def test_thinning_keeps_first_and_last_steps_in_time_order() -> None:
    timeline = timeline_of(10_000)
    thinned = thin_timeline(timeline, 100)
    assert len(thinned) <= 100
    assert thinned[0] == timeline[0] and thinned[-1] == timeline[-1]
    moments = [moment for moment, _ in thinned]
    assert moments == sorted(moments)
    assert thin_timeline(timeline[:50], 100) == timeline[:50]


def row(index: int, speedup: float | None) -> CandidateRow:
    return CandidateRow(id=f"c{index:04d}", name="", origin="llm", backend="triton",
                        parent_id=None, island=0, status="ok" if speedup else "incorrect",
                        reason="passed" if speedup else "output_mismatch",
                        speedup_vs_eager=speedup, speedup_vs_compile=None, runtime_ms=None,
                        created_s=float(index), evaluated_s=float(index), tokens=0, cost_usd=0.0)


def test_a_small_run_shows_every_row_newest_first_without_a_note() -> None:
    rows = [row(index, 1.0 + index / 10 if index % 2 else None) for index in range(ROW_LIMIT)]
    table = candidate_table(rows)
    assert table.note == "" and len(table.groups) == 1 and table.groups[0].caption == ""
    assert [r.id for r in table.groups[0].rows] == [r.id for r in reversed(rows)]


def test_a_large_run_shows_the_fastest_then_the_newest_others() -> None:
    rows = [row(index, 1.0 + index % 97 / 10 if index % 2 else None) for index in range(5000)]
    table = candidate_table(rows, limit=40)
    fastest, newest = table.groups
    assert sum(len(group.rows) for group in table.groups) == 40
    speedups = [r.speedup_vs_eager for r in fastest.rows]
    assert speedups == sorted(speedups, reverse=True) and speedups[0] == pytest.approx(10.6)
    assert newest.rows[0].id == "c4999"
    assert not {r.id for r in fastest.rows} & {r.id for r in newest.rows}
    assert "40 of 5,000" in table.note


def test_each_model_is_listed_once_however_many_calls(large_run: Path) -> None:
    models = load_run(large_run).models
    assert [(m.model, m.calls) for m in models] == [("gpt-x", 3000)]
