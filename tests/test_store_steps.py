"""The fast reads of the UI's pages agree with replaying every verdict.

Best-so-far steps kept by triggers (store_steps) and the archive rebuilt from
its possible elites only (Briefs.archive_offers) are compared with the full
computations on random runs: verdicts judged out of time order, at equal
moments, and judged again.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import sqlite3
from pathlib import Path

import pytest

from kernelevo.report.data import load_run
from kernelevo.report.lineage import archive_settings, cells_of
from kernelevo.search.archive import Archive
from kernelevo.store.run_store import RunStore, rank_candidates
from kernelevo.store.records import Judged
from kernelevo.store.steps import METRICS, Step, scan_steps
from test_store_briefs import add, random_verdict

CELLS = (("triton", "1", False), ("triton", "2", True), ("cuda", "1", False), None)


def random_run(store: RunStore, rng: random.Random, count: int, monkeypatch) -> None:
    """Verdicts at random moments (some equal), a few candidates judged again."""
    clock = iter(rng.choice((rng.uniform(0, 100), 50.0)) + 1e9 for _ in itertools.count())
    monkeypatch.setattr("kernelevo.store.run_store.time.time", lambda: next(clock))
    ids = [add(store, f"c{index}", rng.choice(("triton", "cuda", "pytorch")),
               island=rng.randrange(3), cell=rng.choice(CELLS)) for index in range(count)]
    for candidate_id in rng.sample(ids, int(count * 0.9)):
        store.record_verdict(candidate_id, random_verdict(rng))
    for candidate_id in rng.sample(ids, count // 5):
        store.record_verdict(candidate_id, random_verdict(rng))
    monkeypatch.undo()


def replayed_steps(judged: list[Judged]) -> list[Step]:
    """Best-so-far steps from every verdict, in order: against eager a step must be above
    the last one's interval (its speedup without one); against compile, above its speedup."""
    steps = []
    for metric in METRICS:
        to_beat = None
        for verdict in judged:
            value = getattr(verdict, metric)
            if verdict.kernel and value is not None and (to_beat is None or value > to_beat):
                high = verdict.speedup_vs_eager_high if metric == "speedup_vs_eager" else None
                to_beat = value if high is None else max(value, high)
                steps.append(Step(metric, verdict.id, value, verdict.evaluated_at))
    return steps


def state(archive: Archive) -> list[tuple[dict, dict]]:
    return [(dict(island.elites), dict(island.failures)) for island in archive.islands]


@pytest.mark.parametrize("seed", range(12))
def test_kept_steps_equal_a_replay_of_every_verdict(tmp_path: Path, seed: int,
                                                    monkeypatch) -> None:
    rng = random.Random(seed)
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        random_run(store, rng, rng.randrange(1, 60), monkeypatch)
        expected = replayed_steps(store.briefs.judged_in_order())
        assert store.briefs.best_steps() == expected
        with sqlite3.connect(store.path) as connection:
            assert scan_steps(connection) == expected
        eager = [step.candidate_id for step in expected if step.metric == "speedup_vs_eager"]
        if eager:  # the last step against eager is the run's best, however it is read
            assert store.briefs.best().id == eager[-1] == store.ranking().best.id
            assert rank_candidates(store.candidates()).best.id == eager[-1]


@pytest.mark.parametrize("seed", range(12))
def test_archive_from_offers_equals_a_replay_of_every_verdict(tmp_path: Path, seed: int,
                                                              monkeypatch) -> None:
    rng = random.Random(seed)
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        random_run(store, rng, rng.randrange(1, 80), monkeypatch)
        judged = store.briefs.judged_in_order()
        offers = store.briefs.archive_offers()
    assert_replays_alike(offers, judged)


def assert_replays_alike(offers, judged: list[Judged]) -> None:
    """The archive from the offers is the archive from every verdict, for several settings."""
    assert offers.additions == len(judged)
    for islands, interval in ((1, 0), (3, 0), (3, 1), (3, 4), (4, 7)):
        settings = archive_settings(offers.highest_island, {"islands": islands,
                                                            "migration_interval": interval})
        full = Archive.replay(judged, **settings)
        fast = Archive.replay_offers(offers.offers, offers.additions, offers.failures, **settings)
        assert state(fast) == state(full)
        assert fast.additions == full.additions
        assert cells_of(fast) == cells_of(full)


@pytest.mark.parametrize("seed", range(6))
def test_improvements_spend_what_calls_finished_by_then(tmp_path: Path, seed: int,
                                                        monkeypatch) -> None:
    rng = random.Random(seed)
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        random_run(store, rng, 40, monkeypatch)
        for _ in range(30):
            call = store.start_llm_call("m", {"messages": []})
            monkeypatch.setattr("kernelevo.store.run_store.time.time",
                                lambda: 1e9 + rng.choice((rng.uniform(0, 100), 50.0)))
            store.finish_llm_call(call, "reply", rng.randrange(100), rng.randrange(100),
                                  rng.uniform(0, 0.01), 1.0)
            monkeypatch.undo()
        finished = store.briefs.spend_over_time()
        start, path = store.run_info().created_at, Path(store.path)
    times = [moment for moment, _, _ in finished]
    tokens = [0, *itertools.accumulate(spent for _, spent, _ in finished)]
    costs = [0.0, *itertools.accumulate(cost for _, _, cost in finished)]
    improvements = load_run(path).improvements
    assert improvements
    for step in improvements:
        index = bisect.bisect_right(times, step.elapsed_s + start)
        assert step.tokens == tokens[index]
        assert math.isclose(step.cost_usd, costs[index], rel_tol=1e-9, abs_tol=1e-12)


def test_a_run_made_before_the_steps_gains_them_on_first_open(tmp_path: Path,
                                                              monkeypatch) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        random_run(store, random.Random(3), 40, monkeypatch)
        expected, path = store.briefs.best_steps(), Path(store.path)
    assert expected
    with sqlite3.connect(path) as connection:
        names = [row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'best_step%'")]
        for name in names:
            connection.execute(f"DROP TRIGGER {name}")
        connection.execute("DROP TABLE best_step")
    with RunStore.open(path) as store:
        assert store.briefs.best_steps() == expected


def in_order_run(store: RunStore, rng: random.Random, count: int, monkeypatch) -> None:
    """Verdicts written as a search writes them: each at a later moment, some at equal
    moments in creation order, none judged again."""
    moments = sorted(rng.choice((rng.uniform(0, 100), 50.0)) + 1e9 for _ in range(count))
    clock = iter(moments)
    ids = [add(store, f"c{index}", rng.choice(("triton", "cuda", "pytorch")),
               island=rng.randrange(3), cell=rng.choice(CELLS)) for index in range(count)]
    monkeypatch.setattr("kernelevo.store.run_store.time.time", lambda: next(clock))
    for candidate_id in ids:
        store.record_verdict(candidate_id, random_verdict(rng))
    monkeypatch.undo()


@pytest.mark.parametrize("seed", range(10))
def test_offers_kept_by_the_triggers_equal_a_scan_and_a_full_replay(tmp_path: Path, seed: int,
                                                                    monkeypatch) -> None:
    from kernelevo.store.offers import kept_offers, offers_in_order, scan_offers

    rng = random.Random(seed)
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        in_order_run(store, rng, rng.randrange(1, 80), monkeypatch)
        judged = store.briefs.judged_in_order()
        path = Path(store.path)
    with sqlite3.connect(path) as connection:
        assert offers_in_order(connection)
        kept, scanned = kept_offers(connection), scan_offers(connection)
    assert kept == scanned
    assert_replays_alike(kept, judged)


def test_offers_that_lost_their_order_are_scanned_then_filled_again_by_a_writer(
        tmp_path: Path, monkeypatch) -> None:
    """A verdict deleted (judged again) or written before the last one: readers scan,
    the next writer to open the run fills the offers afresh."""
    from kernelevo.store.offers import kept_offers, offers_in_order, scan_offers

    rng = random.Random(5)
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        in_order_run(store, rng, 30, monkeypatch)
        first = store.briefs.judged_in_order()[0].id
        store.record_verdict(first, random_verdict(rng))  # judged again: a delete
        path = Path(store.path)
    with sqlite3.connect(path) as connection:
        assert not offers_in_order(connection)
        stale = kept_offers(connection)
        truth = scan_offers(connection)
    with RunStore.read(path) as store:  # a reader scans, writing nothing
        assert store.briefs.archive_offers() == truth
    assert stale != truth  # the kept places no longer hold: the scan was needed
    with RunStore.open(path) as store:
        assert store.upgraded == ("the archive's offers",)
        assert store.briefs.archive_offers() == truth
    with sqlite3.connect(path) as connection:
        assert offers_in_order(connection) and kept_offers(connection) == truth
    # One written before the last one: out of order too.
    with RunStore.open(path) as store:
        late = add(store, "late")
        monkeypatch.setattr("kernelevo.store.run_store.time.time", lambda: 1.0)
        store.record_verdict(late, random_verdict(rng))
        monkeypatch.undo()
    with sqlite3.connect(path) as connection:
        assert not offers_in_order(connection)


def test_a_run_made_before_the_offers_gains_them_on_first_open(tmp_path: Path,
                                                               monkeypatch) -> None:
    from kernelevo.store.offers import has_offers, scan_offers

    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        in_order_run(store, random.Random(8), 40, monkeypatch)
        expected, path = store.briefs.archive_offers(), Path(store.path)
    with sqlite3.connect(path) as connection:
        for name in ("archive_offer_insert", "archive_offer_delete"):
            connection.execute(f"DROP TRIGGER {name}")
        for table in ("archive_order", "archive_offer", "archive_failure"):
            connection.execute(f"DROP TABLE {table}")
    before = path.read_bytes()
    with RunStore.read(path) as store:  # read without writing: scanned
        assert store.briefs.archive_offers() == expected
    assert path.read_bytes() == before
    with RunStore.open(path) as store:
        assert "the archive's offers" in store.upgraded
        assert store.briefs.archive_offers() == expected
    with sqlite3.connect(path) as connection:
        assert has_offers(connection) and scan_offers(connection) == expected
