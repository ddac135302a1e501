"""Reads that must stay cheap at 200,000 candidates: one kernel rule, plans that stay in
indexes, a ranking read to a limit, the UI drawing a page once per change.

The kernel rule lives in Python (store_records.is_kernel) and is written out
in SQL (kernel_sql) for the queries and the best-so-far triggers; a table of
cases holds the two equal. Plans are checked with EXPLAIN QUERY PLAN: a
query documented as index-only must read no table row of a verdict or a
candidate (each holds kilobytes of JSON or source).
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

import kernelevo.report.server as server
from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import NO_CUSTOM_KERNEL_FLAG, verdict_for
from kernelevo.run.setup import make_budget
from kernelevo.search.archive import Archive
from kernelevo.store.briefs import _ALL, _KERNEL
from kernelevo.store.records import RankEntry, is_kernel, rank
from kernelevo.store.run_store import RunStore

SOURCE = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"
OTHER_FLAG = "specialised_to_task_sizes"


def judge(store: RunStore, backend: str, verdict, tag: str) -> str:
    candidate_id = store.add_candidate(Candidate(f"{SOURCE}# {tag}\n", backend, name=tag,
                                                 origin="llm"), island=0, cell=("x",))
    if verdict is not None:
        store.record_verdict(candidate_id, verdict)
    return candidate_id


# Every combination the rule tells apart: status, backend, the flag among
# others, the flag's name outside the flags (a note), no verdict at all.
STATUSES = ("passed", "output_mismatch", None)
BACKENDS = ("triton", "cuda", "pytorch")
FLAGS = ((), (NO_CUSTOM_KERNEL_FLAG,), (OTHER_FLAG,), (OTHER_FLAG, NO_CUSTOM_KERNEL_FLAG))
NOTED = (False, True)


def case_verdict(reason: str | None, flags: tuple[str, ...], noted: bool):
    if reason is None:
        return None
    notes = (f"checked: {NO_CUSTOM_KERNEL_FLAG} does not apply",) if noted else ()
    return verdict_for(reason, flags=flags, notes=notes)


def test_the_kernel_rule_in_sql_agrees_with_python_on_every_case(tmp_path: Path) -> None:
    cases = list(itertools.product(STATUSES, BACKENDS, FLAGS, NOTED))
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        ids = [judge(store, backend, case_verdict(reason, flags, noted), f"case {index}")
               for index, (reason, backend, flags, noted) in enumerate(cases)]
        rows = store._database.query(f"SELECT c.id, {_KERNEL} FROM {_ALL} ORDER BY c.sequence")
    in_sql = {row[0]: bool(row[1]) for row in rows}
    for candidate_id, (reason, backend, flags, noted) in zip(ids, cases):
        status = None if reason is None else ("ok" if reason == "passed" else "incorrect")
        expected = is_kernel(status, backend, flags)
        assert in_sql[candidate_id] is expected, (reason, backend, flags, noted)
    assert sum(in_sql.values()) == 2 * 2 * 2  # ok, triton or cuda, unflagged, noted or not


@pytest.mark.parametrize("seed", range(6))
def test_a_ranking_read_to_a_limit_is_the_full_rankings_head(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        judge(store, "pytorch", verdict_for("passed"), "reference")
        for index in range(40):
            speedup = rng.choice((None, 1.5, 2.0, rng.uniform(0.5, 3.0)))
            flags = (NO_CUSTOM_KERNEL_FLAG,) if rng.random() < 0.15 else ()
            verdict = (verdict_for("output_mismatch") if rng.random() < 0.3 else
                       verdict_for("passed", speedup_vs_eager=speedup, flags=flags))
            judge(store, rng.choice(BACKENDS), None if rng.random() < 0.1 else verdict,
                  f"c{index}")
        full = rank(RankEntry.of(stored) for stored in store.candidates())
        for limit in (0, 1, 3, 10, 1000):
            head = store.briefs.ranking(limit)
            assert [e.id for e in head.kernels] == [e.id for e in full.kernels[:limit]]
            assert (head.passing, head.judged, head.failed, head.not_kernels, head.pending) == \
                (len(full.kernels), full.judged, full.failed, full.not_kernels, full.pending)
            assert head.baseline == full.baseline
        assert store.briefs.ranking() == full
        assert store.briefs.best() == full.best == store.ranking().best


def reads_rows(steps: list[str]) -> list[str]:
    """Plan steps that read a candidate's or a verdict's row (not an index alone).

    The flag's partial index (verdict_flagged) names only the verdicts that
    mention the flag: reading those few rows is what tells a flag from a note.
    """
    return [step for step in steps
            if step.split()[0] in ("SCAN", "SEARCH") and step.split()[1] in
            ("c", "v", "candidate", "verdict") and "COVERING INDEX" not in step
            and "verdict_flagged" not in step]


def spied(store: RunStore, read) -> list[tuple[str, tuple]]:
    """The queries `read(store.briefs)` sends, with their parameters."""
    sent: list[tuple[str, tuple]] = []
    query = store._database.query

    def recording(sql: str, parameters: tuple = ()) -> list:
        sent.append((sql, parameters))
        return query(sql, parameters)

    store._database.query = recording  # type: ignore[method-assign]
    try:
        read(store.briefs)
    finally:
        store._database.query = query  # type: ignore[method-assign]
    return sent


# Reads documented as index-only, and which of their queries must be (the
# ranking also reads the baseline's row and its first kernels, a few rows).
INDEX_ONLY = {
    "judged in order": (lambda briefs: briefs.judged_in_order(), ""),
    "ranking counts": (lambda briefs: briefs.ranking(0), "COUNT(*)"),
    "timeline": (lambda briefs: briefs.status_changes(0.0, 1.0, 10), ""),
    "moments": (lambda briefs: briefs.moments(), ""),
}


@pytest.mark.parametrize("name", sorted(INDEX_ONLY))
def test_reads_documented_as_index_only_read_no_row(tmp_path: Path, name: str) -> None:
    read, marker = INDEX_ONLY[name]
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        judge(store, "triton", verdict_for("passed", speedup_vs_eager=2.0), "a")
        plans = [[row[3] for row in store._database.query("EXPLAIN QUERY PLAN " + sql, params)]
                 for sql, params in spied(store, read) if marker in sql]
    assert plans and all(steps and reads_rows(steps) == [] for steps in plans), plans


def test_the_best_and_the_top_rows_walk_the_ranking_index(tmp_path: Path) -> None:
    """Read to a limit: SQLite walks the index in rank order and stops, never sorting all."""
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        judge(store, "triton", verdict_for("passed", speedup_vs_eager=2.0), "a")
        sent = [(sql, params) for sql, params in spied(store, lambda b: b.ranking(10))
                if "verdict_best" in sql]
        plans = [[row[3] for row in store._database.query("EXPLAIN QUERY PLAN " + sql, params)]
                 for sql, params in sent]
    assert plans and all(any("INDEX verdict_best" in step for step in steps) for steps in plans)
    assert not any("USE TEMP B-TREE FOR ORDER BY" in step for steps in plans for step in steps)


def test_a_seed_given_on_resume_is_found_by_its_source_alone(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        planted = Candidate(SOURCE, "triton", name="mine", origin="seed")
        store.add_candidate(planted)
        store.add_candidate(Candidate(SOURCE + "# 2\n", "triton", name="made", origin="llm"))
        assert store.briefs.is_seed(Candidate(SOURCE, "triton"))
        assert not store.briefs.is_seed(Candidate(SOURCE + "# 2\n", "triton"))  # not a seed
        assert not store.briefs.is_seed(Candidate(SOURCE + "# 3\n", "triton"))


def test_the_ui_draws_a_run_page_once_per_change(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        judge(store, "triton", verdict_for("passed", speedup_vs_eager=2.0), "a")
        run_id = store.run_id
    drawn: list[str] = []
    draw = server.html.render_run_page
    monkeypatch.setattr(server.html, "render_run_page",
                        lambda data: drawn.append(data.run_id) or draw(data))
    first = server.route(tmp_path, f"/run/{run_id}", {}).body
    again = server.route(tmp_path, f"/run/{run_id}", {}).body
    assert drawn == [run_id] and again == first
    with RunStore.open(tmp_path / run_id) as store:
        judge(store, "triton", verdict_for("passed", speedup_vs_eager=3.0), "new one")
    fresh = server.route(tmp_path, f"/run/{run_id}", {}).body
    assert drawn == [run_id, run_id] and b"new one" in fresh


def test_cached_rankings_replay_like_a_fresh_sort(tmp_path: Path) -> None:
    """Islands keep their ranking between changes; replays and migrations end the same."""
    rng = random.Random(3)
    judged = [(f"c{i}", (rng.randrange(4),), rng.choice((None, rng.uniform(0.5, 3))),
               rng.randrange(3)) for i in range(600)]
    archive = Archive(3, migration_interval=7)
    for candidate_id, cell, fitness, island in judged:
        archive.add(candidate_id, cell, fitness, island)
        for each in archive.islands:
            fresh = sorted(each.elites.values(), key=lambda e: (-e.fitness, e.order))
            assert each.ranked() == fresh
            assert each.leaders(1) == fresh[:1] and each.leaders(2) == fresh[:2]


def test_grid_cells_fit_their_text_at_scale() -> None:
    from kernelevo.report.lineage import CellView, IslandCells
    from kernelevo.report.svg import CHAR_PX, cell_grids

    cells = tuple(CellView(("triton", fusion, True, memory, "medium"), f"c1{index:05d}",
                           4.5, 123_456)
                  for index, (fusion, memory) in enumerate(itertools.product(
                      ("0", "1", "2", "3+"), ("direct", "staged", "persistent"))))
    grid = str(cell_grids([IslandCells(0, cells)])[0])
    width = float(grid.split('<rect class="cell" ')[1].split('width="')[1].split('"')[0])
    # The longest line a cell holds, and every line at most a cell wide.
    assert "c100011" in grid and "4.50x ✕123k" in grid
    assert len("4.50x ✕123k") * CHAR_PX < width
    # Row labels end at a margin wide enough for the longest, so none is cut on the left.
    row_label_x = float(grid.split('text-anchor="end"')[0].rsplit('x="', 1)[1].split('"')[0])
    assert row_label_x >= len("triton · 3+ kernel(s) · tensor cores") * CHAR_PX



def test_the_archive_s_offers_read_no_verdict_and_their_scan_reads_indexes_only(
        tmp_path: Path) -> None:
    """Kept offers are read from their own small tables; the scan that stands in for
    them (an older or reordered run) reads the covering indexes, no row."""
    import sqlite3

    from kernelevo.store import offers

    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        judge(store, "triton", verdict_for("passed", speedup_vs_eager=2.0), "a")
        judge(store, "triton", verdict_for("output_mismatch"), "b")
        path = store.path
    sent: list[str] = []
    with sqlite3.connect(path) as connection:
        connection.set_trace_callback(sent.append)
        kept = offers.kept_offers(connection)
        connection.set_trace_callback(None)
        assert sent and not any(" verdict" in sql or "candidate c" in sql for sql in sent)
        assert kept == offers.scan_offers(connection)
        connection.set_trace_callback(sent.append)
        sent.clear()
        offers.scan_offers(connection)
        connection.set_trace_callback(None)
        plans = [[row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + sql)]
                 for sql in sent]
    assert plans and all(steps and reads_rows(steps) == [] for steps in plans), plans


def with_events(folder: Path, count: int) -> RunStore:
    """A run whose events log holds `count` events, a third of them `elapsed`."""
    store = RunStore.create(folder, "add", "# task", {})
    rows = [(1_000.0 + index, ("elapsed", "busy", "llm_attempt")[index % 3],
             json.dumps({"elapsed_s": index * 0.5, "error": "x" * 300}))
            for index in range(count)]
    with store._database.transaction() as db:
        db.executemany("INSERT INTO events (at, kind, payload_json) VALUES (?, ?, ?)", rows)
    return store


def steps_of(store: RunStore, read) -> tuple[int, object]:
    """The SQLite virtual machine's steps that `read()` takes, and what it returned."""
    counted = [0]

    def tick() -> int:
        counted[0] += 1
        return 0

    connection = store._database._connection
    connection.set_progress_handler(tick, 1)
    try:
        value = read()
    finally:
        connection.set_progress_handler(None, 1)
    return counted[0], value


LIMITS = {"tokens": None, "usd": None, "candidates": None, "wall_s": None}


def test_the_run_page_and_resume_read_the_events_log_in_work_that_does_not_grow(
        tmp_path: Path) -> None:
    """The latest event and the longest clock: one index entry each, at 300 events or 30,000."""
    reads = {"run page": lambda store: store.briefs.event_summary(),
             "resume": lambda store: make_budget(LIMITS, store).usage().elapsed_s}
    taken = {}
    for count in (300, 30_000):
        with with_events(tmp_path / str(count), count) as store:
            for name, read in reads.items():
                taken[name, count] = steps_of(store, lambda: read(store))
    summary = taken["run page", 30_000][1]
    assert (summary.last_at, summary.elapsed_s) == (30_999.0, 14_998.5)
    assert taken["resume", 30_000][1] == pytest.approx(14_998.5, abs=5.0)
    for name in reads:
        assert taken[name, 30_000][0] == taken[name, 300][0], (name, taken)


def test_the_latest_event_and_the_longest_clock_are_read_from_their_indexes(
        tmp_path: Path) -> None:
    with with_events(tmp_path, 30) as store:
        sent = spied(store, lambda briefs: (briefs.event_summary(), briefs.longest_elapsed_s()))
        plans = [" ".join(row[3] for row in store._database.query("EXPLAIN QUERY PLAN " + sql))
                 for sql, _ in sent]
    assert len(plans) == 2 and all("SCAN events" not in plan for plan in plans), plans
    assert "COVERING INDEX events_at" in plans[0]
    assert all("INDEX events_elapsed" in plan for plan in plans), plans
