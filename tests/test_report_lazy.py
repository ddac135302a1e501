"""Pages read in full only what they show, and show what a full read of the run shows.

The report, the UI and the search's progress and resume read candidates as
briefs (no source, verdict JSON, prompt or reply). Here every view is checked
against the same figures computed from `RunStore.candidates()` and
`RunStore.llm_calls()`, the full reads they replaced, and those full reads
are made to fail while the views are drawn, so none sneaks back in.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from kernelevo.budget import Budget
from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import verdict_for
from kernelevo.run.setup import make_budget
from kernelevo.report import data, units, write_report
from kernelevo.report.data import call_mode, load_run
from kernelevo.report.detail import load_candidate_detail
from kernelevo.report.lineage import lineage
from kernelevo.report.server import route
from kernelevo.report.svg import thin_timeline
from kernelevo.report.table import CandidateRow, candidate_table
from kernelevo.search.archive import Archive, ArchiveEntry, fitness
from kernelevo.search.config import SearchConfig
from kernelevo.search.loop import Evolution
from kernelevo.store.run_store import RunStore, StoredCandidate
from tests.test_report import TIMED_RUN_ID, make_timed_run, section, timed_verdict
from tests.test_report_scale import scale_run_module


@pytest.fixture(scope="module")
def timed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_timed_run(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def large_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scale_run_module().generate(tmp_path_factory.mktemp("large"), 260)


def full_rows(run: Path) -> list[CandidateRow]:
    """Every candidate as a table row, from full reads of every row and call."""
    with RunStore.open(run) as store:
        start, candidates, calls = store.run_info().created_at, store.candidates(), \
            store.llm_calls()
    rows = []
    for stored in candidates:
        verdict, own = stored.verdict, [c for c in calls if c.candidate_id == stored.id]
        timing = verdict.timings.get("candidate") if verdict else None
        parents = stored.candidate.parent_ids
        rows.append(CandidateRow(
            id=stored.id, name=stored.candidate.name, origin=stored.candidate.origin,
            backend=stored.candidate.backend, parent_id=parents[0] if parents else None,
            island=stored.island, status=verdict.status if verdict else "pending",
            reason=verdict.reason if verdict else stored.state,
            speedup_vs_eager=verdict.speedup_vs_eager if verdict else None,
            speedup_vs_compile=verdict.speedup_vs_compile if verdict else None,
            runtime_ms=timing.median_ms if timing else None,
            created_s=stored.created_at - start,
            evaluated_s=stored.evaluated_at - start if stored.evaluated_at else None,
            tokens=sum(c.input_tokens + c.output_tokens for c in own),
            cost_usd=sum(c.cost_usd for c in own)))
    return rows


def cells(row: CandidateRow) -> list[str]:
    """A row's table cells as the page writes them."""
    return [row.id, row.name, row.origin, row.parent_id or "-",
            "-" if row.island is None else str(row.island), row.status, row.reason,
            units.speedup(row.speedup_vs_eager), units.speedup(row.speedup_vs_compile),
            units.milliseconds(row.runtime_ms), units.tokens(row.tokens), units.usd(row.cost_usd),
            units.duration(row.evaluated_s)]


def shown_rows(page: str) -> dict[str, list[str]]:
    """The candidate table's rows in page order: id -> its cells as text."""
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", section(page, "candidates"), re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
                 for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        if cells:
            rows[cells[0]] = cells
    return rows


@pytest.fixture
def no_full_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Full reads of every candidate or call fail; yields the ids read one by one."""
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a page read every candidate or call in full")

    read: list[str] = []
    one = RunStore.candidate

    def counted(store: RunStore, candidate_id: str) -> StoredCandidate:
        read.append(candidate_id)
        return one(store, candidate_id)

    monkeypatch.setattr(RunStore, "candidates", refuse)
    monkeypatch.setattr(RunStore, "llm_calls", refuse)
    monkeypatch.setattr(RunStore, "candidate", counted)
    return read


# -- what the pages show -------------------------------------------------------


def test_the_report_shows_every_field_of_every_row(timed_run: Path, tmp_path: Path) -> None:
    expected = {row.id: cells(row) for row in reversed(full_rows(timed_run))}  # newest first
    page = write_report(timed_run, tmp_path / "report.html").read_text()
    shown = shown_rows(page)
    assert list(shown) == list(expected) and shown == expected


def test_a_large_report_shows_the_rows_a_full_read_would_choose(large_run: Path,
                                                                tmp_path: Path) -> None:
    rows = full_rows(large_run)
    table = candidate_table(rows)
    page = write_report(large_run, tmp_path / "report.html").read_text()
    shown = shown_rows(page)
    assert shown == {row.id: cells(row) for group in table.groups for row in group.rows}
    assert list(shown) == [row.id for group in table.groups for row in group.rows]
    assert table.note in html.unescape(page) and "of 260 candidates" in page


def test_the_best_kernels_lineage_and_parent_match_a_full_read(timed_run: Path) -> None:
    with RunStore.open(timed_run) as store:
        by_id = {stored.id: stored for stored in store.candidates()}
        modes = {c.candidate_id: call_mode(c) for c in store.llm_calls() if c.candidate_id}
    data = load_run(timed_run)
    assert data.best.stored == by_id["c0005"] and data.best.parent == by_id["c0004"]
    assert data.lineage == lineage(by_id, "c0005", modes)
    assert data.baseline == by_id["c0001"]
    assert data.best.reference_source == by_id["c0001"].candidate.source


def full_timeline(run: Path) -> list[tuple[float, dict[str, int]]]:
    """Counts per status after every moment, from full reads of every candidate."""
    with RunStore.open(run) as store:
        start, candidates = store.run_info().created_at, store.candidates()
    changes = []
    for stored in candidates:
        changes.append((stored.created_at, "pending", 1))
        if stored.verdict is not None:
            judged_at = stored.evaluated_at or stored.created_at
            changes += [(judged_at, "pending", -1), (judged_at, stored.verdict.status, 1)]
    counts: dict[str, int] = {}
    timeline: list[tuple[float, dict[str, int]]] = []
    for moment, status, delta in sorted(changes, key=lambda change: change[0]):
        counts[status] = counts.get(status, 0) + delta
        snapshot = {name: count for name, count in counts.items() if count}
        if timeline and timeline[-1][0] == moment - start:
            timeline[-1] = (moment - start, snapshot)
        else:
            timeline.append((moment - start, snapshot))
    return timeline


def test_a_small_runs_status_timeline_has_every_moment(timed_run: Path) -> None:
    assert list(load_run(timed_run).timeline) == full_timeline(timed_run)


def test_a_large_runs_status_timeline_is_cut_as_the_plot_cuts(
        large_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full = full_timeline(large_run)
    monkeypatch.setattr(data, "TIMELINE_STEPS", 60)
    assert len(full) > 2 * 60
    timeline = load_run(large_run).timeline
    assert list(timeline) == list(thin_timeline(full, 60))
    assert timeline[-1] == full[-1]  # the final counts stay exact


# -- what the pages read -------------------------------------------------------


def test_the_report_reads_only_the_best_its_parent_and_the_baseline_in_full(
        timed_run: Path, tmp_path: Path, no_full_reads: list[str]) -> None:
    page = write_report(timed_run, tmp_path / "report.html").read_text()
    assert "Best kernel: c0005" in page and "repair of compile_failed" in page
    assert sorted(set(no_full_reads)) == ["c0001", "c0004", "c0005"]


def test_a_candidate_page_reads_its_source_and_prompt_alone(timed_run: Path,
                                                            no_full_reads: list[str]) -> None:
    detail = load_candidate_detail(timed_run, "c0004")
    assert "# one launch" in detail.stored.candidate.source
    assert [call.prompt["mode"] for call in detail.calls] == ["repair"]
    assert detail.calls[0].response_text.startswith("```python")
    assert detail.parent.id == "c0003" and "x + y + z" in detail.parent.candidate.source
    assert [step.candidate_id for step in detail.lineage] == ["c0002", "c0003", "c0004"]
    assert detail.lineage[-1].change == "repair of compile_failed"
    assert (detail.tokens, detail.cost_usd) == (2400, 0.018)
    assert "class ModelNew(" in detail.reference_source  # the PyTorch seed's source
    assert set(no_full_reads) <= {"c0001", "c0004"}


def test_a_candidate_page_matches_a_full_read(timed_run: Path) -> None:
    with RunStore.open(timed_run) as store:
        by_id = {stored.id: stored for stored in store.candidates()}
        calls = store.llm_calls()
    modes = {c.candidate_id: call_mode(c) for c in calls if c.candidate_id}
    for candidate_id in by_id:
        detail = load_candidate_detail(timed_run, candidate_id)
        parents = by_id[candidate_id].candidate.parent_ids
        assert detail.stored == by_id[candidate_id]
        assert detail.parent == (by_id.get(parents[0]) if parents else None)
        assert detail.calls == tuple(c for c in calls if c.candidate_id == candidate_id)
        assert detail.lineage == lineage(by_id, candidate_id, modes)


@pytest.mark.parametrize("path", [
    "/", f"/run/{TIMED_RUN_ID}", f"/run/{TIMED_RUN_ID}/candidate/c0003",
    f"/api/run/{TIMED_RUN_ID}/summary", f"/compare?runs={TIMED_RUN_ID}"])
def test_ui_pages_draw_without_full_reads(timed_run: Path, path: str,
                                          no_full_reads: list[str]) -> None:
    response = route(timed_run.parent, path.split("?")[0],
                     {"runs": [TIMED_RUN_ID]} if "?" in path else {})
    assert response.status == 200 and len(no_full_reads) <= 3  # best, its parent, baseline


# -- the search's progress and resume ------------------------------------------


def progress_best(store: RunStore) -> str | None:
    evolution = Evolution(store, [], SearchConfig(backend="triton"), Budget(), proposer=None)
    evolution._report()
    return evolution.progress.best_id


def add(store: RunStore, tag: str, backend: str = "triton", origin: str = "llm",
        island: int = 0) -> str:
    return store.add_candidate(Candidate(f"class ModelNew: pass  # {tag}\n", backend,
                                         name=tag, origin=origin),
                               island=island, cell=("triton", tag[-1], False))


def test_progress_names_the_best_after_each_verdict(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        evolution = Evolution(store, [], SearchConfig(backend="triton"), Budget(),
                              proposer=None)
        seed = add(store, "seed0", "pytorch", "seed")
        first, second, third = add(store, "k1"), add(store, "k2"), add(store, "k3")
        seen = []
        for candidate_id, verdict in ((seed, timed_verdict(2.0)), (first, timed_verdict(1.6)),
                                      (second, verdict_for("output_mismatch")),
                                      (third, timed_verdict(0.8)),
                                      (third, timed_verdict(1.8)),  # judged again: counts stay
                                      (first, verdict_for("output_mismatch")),
                                      (third, verdict_for("output_mismatch"))):
            store.record_verdict(candidate_id, verdict)
            evolution._report()  # the live tick, after the verdict was stored
            best = store.ranking().best
            assert evolution.progress.best_id == (best.id if best else None)
            assert evolution.progress.best_vs_eager == (best.speedup_vs_eager if best else None)
            seen.append(evolution.progress.best_id)
    # The seed is the baseline, never the best; a kernel judged again, slower or
    # wrong, hands the best on, until none is left.
    assert seen == [None, first, first, third, first, third, None]


def test_resume_rebuilds_the_archive_and_best_a_full_read_gives(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        add(store, "seed0", "pytorch", "seed")
        ids = [add(store, f"k{index % 4}", island=index % 2) for index in range(12)]
        for index, candidate_id in enumerate(ids[:10]):
            store.record_verdict(candidate_id, timed_verdict(2.0 / (1 + index % 5))
                                 if index % 3 else verdict_for("output_mismatch"))
        path = store.path
    with RunStore.open(path) as store:
        resumed = Evolution(store, [], SearchConfig(backend="triton", islands=2), Budget(),
                            proposer=None)
        resumed.resume()
        judged = sorted((c for c in store.candidates() if c.verdict is not None),
                        key=lambda c: (c.evaluated_at or 0.0, c.sequence))
        expected = Archive.rebuild(
            [ArchiveEntry(c.id, tuple(c.cell or ()), fitness(c.verdict), c.island or 0)
             for c in judged], **resumed.archive.settings())
        assert [resumed.archive.elites(i) for i in range(2)] == \
            [expected.elites(i) for i in range(2)]
        assert [resumed.archive.failures(i) for i in range(2)] == \
            [expected.failures(i) for i in range(2)]
        assert resumed.queue.qsize() == 3  # the seed and the two kernels never judged
        best = store.ranking().best
        assert best is not None and progress_best(store) == best.id
        budget = make_budget({"tokens": None, "usd": None, "candidates": None, "wall_s": None},
                             store)
        assert budget.usage().candidates == 12  # the seed is not counted
