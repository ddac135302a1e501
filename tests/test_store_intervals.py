"""Speedup intervals in the run store: written with each verdict, read where the archive
is replayed and the best is decided, and added to runs made before them as unknown."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from kernelevo.evaluate.verdict import Verdict, verdict_for
from kernelevo.report.lineage import archive_settings
from kernelevo.search.archive import Archive
from kernelevo.store.run_store import RunStore, rank_candidates
from kernelevo.store.tables import SCHEMA_VERSION
from test_store_briefs import add, interval

EAGER = "speedup_vs_eager"


def timed(speedup: float, spread: float | None = None) -> Verdict:
    """A passing verdict; with `spread`, a rerun may show the speedup that share off."""
    fields = interval(speedup, spread) if spread is not None else {}
    return verdict_for("passed", speedup_vs_eager=speedup, speedup_vs_compile=speedup / 2,
                       **fields)


def judge_in_turn(store: RunStore, verdicts: list[Verdict]) -> list[str]:
    """One candidate per verdict, all in one cell of island 0, judged in the order given."""
    ids = [add(store, f"k{index}") for index in range(len(verdicts))]
    for candidate_id, verdict in zip(ids, verdicts):
        store.record_verdict(candidate_id, verdict)
    return ids


def elite_of(offers) -> str:
    settings = archive_settings(offers.highest_island, {"islands": 1})
    archive = Archive.replay_offers(offers.offers, offers.additions, offers.failures,
                                    **settings)
    return archive.best().candidate_id


def test_a_verdicts_interval_is_stored_and_read_back_by_every_replay(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        first, inside, untimed_range, beyond = judge_in_turn(store, [
            timed(2.0, 0.15),  # a rerun may show 1.7x-2.3x
            timed(2.2, 0.15),  # 10 % faster, inside the first's interval: a tie
            verdict_for("output_mismatch", **interval(9.0, 0.1)),  # no speedup, no high end
            timed(2.4)])  # beyond 2.3, with no interval of its own
        rows = dict(sqlite3.connect(store.path).execute(
            "SELECT candidate_id, speedup_vs_eager_high FROM verdict").fetchall())
        assert rows == {first: pytest.approx(2.3), inside: pytest.approx(2.53),
                        untimed_range: None, beyond: None}
        assert store.candidate(first).verdict.speedup_vs_eager_high == rows[first]
        judged = store.briefs.judged_in_order()
        assert [j.speedup_vs_eager_high for j in judged] == [rows[first], rows[inside], None,
                                                             None]
        offers = store.briefs.archive_offers()
        assert [offer[5] for offer in offers.offers] == [rows[first], rows[inside], None]
        settings = archive_settings(offers.highest_island, {"islands": 1})
        assert Archive.replay(judged[:2], **settings).best().candidate_id == first
        assert Archive.replay(judged, **settings).best().candidate_id == beyond
        assert elite_of(offers) == beyond


def test_the_best_moves_only_beyond_the_incumbents_interval(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        first, inside = judge_in_turn(store, [timed(2.0, 0.15), timed(2.2, 0.15)])
        # The faster point is inside the first's interval: the best stays where it was.
        assert store.briefs.best().id == first == store.best().id
        assert [entry.id for entry in store.ranking().kernels] == [first, inside]
        assert rank_candidates(store.candidates()) == store.ranking()
        assert [step.candidate_id for step in store.briefs.best_steps()
                if step.metric == EAGER] == [first]
        (beyond,) = judge_in_turn(store, [timed(2.31)])
        assert store.briefs.best().id == beyond
        assert [entry.id for entry in store.ranking().kernels] == [beyond, inside, first]
        assert [step.candidate_id for step in store.briefs.best_steps()
                if step.metric == EAGER] == [first, beyond]
        # Against torch.compile, which decides nothing, every faster point is a step.
        assert [step.candidate_id for step in store.briefs.best_steps()
                if step.metric != EAGER] == [first, inside, beyond]


def test_a_best_judged_again_hands_the_lead_on_by_the_same_rule(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        first, second, third = judge_in_turn(store, [timed(2.0), timed(2.1, 0.3),
                                                     timed(2.6)])
        assert store.briefs.best().id == second  # 2.6 is inside second's 1.47x-2.73x
        store.record_verdict(second, verdict_for("output_mismatch"))  # judged again: wrong
        # Without second, third is beyond first: it leads, steps and readers agree.
        assert store.briefs.best().id == third == rank_candidates(store.candidates()).best.id
        assert [step.candidate_id for step in store.briefs.best_steps()
                if step.metric == EAGER] == [first, third]
        with sqlite3.connect(store.path) as connection:
            assert connection.execute("SELECT in_order FROM best_step_order").fetchone() == (1,)


def make_version_2(database: Path) -> None:
    """Leave the store as KernelEvo's schema version 2 did: no speedup intervals."""
    raw = sqlite3.connect(database)
    for (trigger,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"
                                  " AND (name LIKE 'best_step%' OR name LIKE 'archive_offer%')"
                                  ).fetchall():
        raw.execute(f"DROP TRIGGER {trigger}")
    raw.execute("DROP TABLE best_step_order")
    raw.execute("ALTER TABLE best_step DROP COLUMN speedup_to_beat")
    raw.execute("ALTER TABLE archive_offer DROP COLUMN speedup_vs_eager_high")
    raw.execute("DROP INDEX verdict_figures")
    raw.execute("ALTER TABLE verdict DROP COLUMN speedup_vs_eager_high")
    raw.execute("CREATE INDEX verdict_figures ON verdict(candidate_id, status, speedup_vs_eager,"
                " speedup_vs_compile, evaluated_at, runtime_ms, reason)")
    raw.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()


def test_a_version_2_run_reads_unchanged_and_migrates_to_no_interval(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        first, faster = judge_in_turn(store, [timed(2.0, 0.15), timed(2.2, 0.15)])
        assert store.briefs.best().id == first
        path = Path(store.path)
    make_version_2(path)
    before = hashlib.sha256(path.read_bytes()).digest()
    with RunStore.read(path) as store:  # the intervals are unknown: points decide, as before
        assert store.briefs.best().id == faster
        assert [j.speedup_vs_eager_high for j in store.briefs.judged_in_order()] == [None, None]
        assert elite_of(store.briefs.archive_offers()) == faster
        read = (store.ranking(), store.briefs.best_steps(), store.briefs.archive_offers())
    assert hashlib.sha256(path.read_bytes()).digest() == before
    with RunStore.open(path) as store:
        assert store.upgraded[:2] == (f"schema version 2 -> {SCHEMA_VERSION}",
                                      "the verdicts' speedup intervals")
        assert (store.ranking(), store.briefs.best_steps(), store.briefs.archive_offers()) == read
        (later,) = judge_in_turn(store, [timed(2.3, 0.2)])  # beyond 2.2, which has no interval
        (inside,) = judge_in_turn(store, [timed(2.6)])  # inside the later one's 2.76
        assert store.briefs.best().id == later
        assert elite_of(store.briefs.archive_offers()) == later
        assert rank_candidates(store.candidates()) == store.ranking()
    with sqlite3.connect(path) as connection:
        index = connection.execute("SELECT sql FROM sqlite_master WHERE name = 'verdict_figures'"
                                   ).fetchone()[0]
        highs = dict(connection.execute("SELECT candidate_id, speedup_vs_eager_high FROM verdict"))
    assert "speedup_vs_eager_high" in index  # the covering index covers it again
    assert highs == {first: None, faster: None, later: pytest.approx(2.76), inside: None}
