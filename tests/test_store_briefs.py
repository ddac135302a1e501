"""Light reads (store_briefs) agree with reading every row in full, and touch no source.

Each query here stands in for a full read that a large run made slow; every
test compares the two on runs written through the store's API.
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3
from pathlib import Path

import pytest

from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import TimingStats, Verdict, verdict_for
from kernelevo.store.run_store import DB_NAME, RunStore, rank_candidates
from kernelevo.store.tables import INDEXES

SOURCE = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"
GPU = {"device": "cuda", "gpu": "NVIDIA H200", "torch": "2.11.0"}
CPU = {"device": "cpu", "torch": "2.11.0"}


def timed(speedup: float, environment: dict[str, str] | None = None) -> Verdict:
    timings = {"candidate": TimingStats(1.0 / speedup, 0.01, 0.9 / speedup, 50),
               "eager": TimingStats(1.0, 0.01, 0.9, 50)}
    return verdict_for("passed", timings=timings, speedup_vs_eager=speedup,
                       speedup_vs_compile=speedup / 2, environment=environment or {})


def add(store: RunStore, tag: str, backend: str = "triton", origin: str = "llm",
        parents: tuple[str, ...] = (), island: int = 0,
        cell: tuple | None = ("triton", "1", False)) -> str:
    candidate = Candidate(f"{SOURCE}# {tag}\n", backend, name=tag, origin=origin,
                          parent_ids=parents)
    return store.add_candidate(candidate, island=island, cell=cell)


def random_run(store: RunStore, rng: random.Random, count: int) -> None:
    """Candidates of every kind the best rule tells apart, judged in a shuffled order."""
    ids = [add(store, "reference", "pytorch", "seed")] if rng.random() < 0.7 else []
    for index in range(count):
        backend = rng.choice(("triton", "triton", "cuda", "pytorch"))
        origin = rng.choice(("llm", "tuner", "repair", "seed"))
        ids.append(add(store, f"c{index}", backend, origin, island=index % 2))
    rng.shuffle(ids)
    for candidate_id in ids[: int(len(ids) * 0.8)]:
        store.record_verdict(candidate_id, random_verdict(rng))


def random_verdict(rng: random.Random) -> Verdict:
    """Any verdict the rules tell apart; half the timed ones with a speedup interval."""
    speedup = rng.choice((None, 1.5, 2.0, 2.0, rng.uniform(0.5, 3.0)))
    timing = interval(speedup, rng.uniform(0.05, 0.4)) if speedup and rng.random() < 0.5 else {}
    kind = rng.random()
    if kind < 0.25:
        return verdict_for("output_mismatch", speedup_vs_eager=speedup, **timing)
    if kind < 0.35:
        return verdict_for("passed", speedup_vs_eager=speedup, flags=("no_custom_kernel",),
                           **timing)
    if kind < 0.4:  # the flag's name in a note only: not flagged
        return verdict_for("passed", speedup_vs_eager=speedup,
                           notes=("checked: no_custom_kernel does not apply",), **timing)
    return verdict_for("passed", speedup_vs_eager=speedup, **timing)


def interval(speedup: float, spread: float) -> dict:
    """A verdict's fields for a speedup of `speedup` within +-`spread` (a share) on a rerun."""
    return {"timing_measure": "call",
            "speedup_ranges": {"call": {"eager": [speedup * (1 - spread),
                                                  speedup * (1 + spread)]}}}


# -- the best kernel and the baseline -------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_best_and_baseline_queries_name_what_the_full_ranking_names(tmp_path: Path,
                                                                    seed: int) -> None:
    rng = random.Random(seed)
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        random_run(store, rng, rng.randint(0, 25))
        full = rank_candidates(store.candidates())
        best, baseline = store.briefs.best(), store.briefs.baseline()
        assert (best.id if best else None) == (full.best.id if full.best else None)
        assert (baseline.id if baseline else None) == \
            (full.baseline.id if full.baseline else None)
        assert store.ranking() == full == rank_candidates(store.candidates())
        assert (store.best().id if store.best() else None) == (best.id if best else None)


def test_speedup_ties_go_to_the_first_judged_then_the_first_made(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        first_made, second_made = add(store, "a"), add(store, "b")
        store.record_verdict(second_made, timed(2.0))
        store.record_verdict(first_made, timed(2.0))
        assert store.briefs.best().id == second_made  # judged first
        untimed = add(store, "untimed")
        store.record_verdict(untimed, verdict_for("passed"))
        assert store.briefs.best().id == second_made  # a timed kernel beats an untimed one


def test_a_replaced_verdict_moves_the_best(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        fast, slow = add(store, "fast"), add(store, "slow")
        store.record_verdict(fast, timed(3.0))
        store.record_verdict(slow, timed(1.5))
        assert store.briefs.best().id == fast
        store.record_verdict(fast, verdict_for("output_mismatch"))  # judged again, now wrong
        assert store.briefs.best().id == slow == store.ranking().best.id


@pytest.mark.parametrize("seed", range(6))
def test_ordered_reads_match_the_full_rows(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        random_run(store, rng, 30)
        full = store.candidates()
        ranking = rank_candidates(full)
        judged = sorted((c for c in full if c.verdict), key=lambda c: (c.evaluated_at, c.sequence))
        kernels = {entry.id for entry in ranking.kernels}
        assert [tuple(j) for j in store.briefs.judged_in_order()] == [
            (c.id, c.cell, c.island, c.verdict.status, c.verdict.speedup_vs_eager,
             c.verdict.speedup_vs_compile, c.evaluated_at, c.id in kernels,
             c.verdict.speedup_vs_eager_high) for c in judged]
        timed = [c for c in full if c.verdict and c.verdict.ok
                 and c.verdict.speedup_vs_eager is not None]
        fastest = sorted(timed, key=lambda c: -c.verdict.speedup_vs_eager)[:5]
        assert [b.id for b in store.briefs.fastest(5)] == [c.id for c in fastest]
        assert [b.id for b in store.briefs.candidates(newest_first=True, limit=7)] == \
            [c.id for c in reversed(full)][:7]
        moments = [c.created_at for c in full] + [c.evaluated_at for c in judged]
        assert store.briefs.moments() == (min(moments), max(moments))


# -- briefs of candidates and calls ----------------------------------------------


def test_candidate_briefs_hold_what_the_full_rows_hold(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        seed = add(store, "seed", "pytorch", "seed", cell=None)
        kernel = add(store, "kernel", parents=(seed,), island=1)
        flagged = add(store, "flagged", parents=(kernel, seed))
        add(store, "pending", parents=(kernel,))
        store.record_verdict(seed, timed(1.0, CPU))
        store.record_verdict(kernel, dataclasses.replace(timed(2.5, GPU), **interval(2.5, 0.2)))
        store.record_verdict(flagged, verdict_for("passed", flags=("no_custom_kernel",)))
        briefs, full = store.briefs.candidates(), store.candidates()
    assert briefs[1].speedup_vs_eager_high == pytest.approx(3.0)
    assert [brief.id for brief in briefs] == [stored.id for stored in full]
    for brief, stored in zip(briefs, full):
        verdict = stored.verdict
        timing = verdict.timings.get("candidate") if verdict else None
        assert (brief.sequence, brief.name, brief.backend, brief.origin, brief.parent_ids,
                brief.island, brief.cell, brief.created_at, brief.state) == \
            (stored.sequence, stored.candidate.name, stored.candidate.backend,
             stored.candidate.origin, stored.candidate.parent_ids, stored.island, stored.cell,
             stored.created_at, stored.state)
        assert (brief.status, brief.reason, brief.speedup_vs_eager, brief.speedup_vs_compile,
                brief.runtime_ms, brief.evaluated_at, brief.flags,
                brief.speedup_vs_eager_high) == \
            ((verdict.status, verdict.reason, verdict.speedup_vs_eager,
              verdict.speedup_vs_compile, timing.median_ms if timing else None,
              stored.evaluated_at, verdict.flags, verdict.speedup_vs_eager_high) if verdict
             else (None, None, None, None, None, None, (), None))


def test_spend_reads_match_the_calls(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        first, second = add(store, "first"), add(store, "second")
        for model, candidate, tokens, cost in (("big", first, (1000, 500), 0.03),
                                               ("small", second, (200, 100), 0.001),
                                               ("big", second, (800, 300), 0.02)):
            call = store.start_llm_call(model, {"messages": []})
            store.finish_llm_call(call, "reply", *tokens, cost, 1.0, candidate_id=candidate)
        failed = store.start_llm_call("small", {"messages": []})
        store.fail_llm_call(failed, "HTTP 500", input_tokens=70)
        store.start_llm_call("big", {"messages": []})  # still in flight
        calls = store.llm_calls()
        assert store.briefs.spend_of([first, second, "c0404"]) == {
            first: (1500, 0.03), second: (300 + 1100, 0.001 + 0.02)}
        finished = sorted((c for c in calls if c.finished_at is not None),
                          key=lambda c: (c.finished_at, c.id))
        assert store.briefs.spend_over_time() == [
            (c.finished_at, c.input_tokens + c.output_tokens, c.cost_usd) for c in finished]
        assert store.briefs.models() == [("big", 3, 2600, 0.05), ("small", 2, 370, 0.001)]


def test_proposed_count_leaves_out_seeds(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        assert store.briefs.moments() is None and store.briefs.proposed_count() == 0
        add(store, "seed", "pytorch", "seed")
        for origin in ("llm", "tuner", "repair", "seed"):
            add(store, origin, origin=origin)
        assert store.briefs.proposed_count() == 3


def test_environment_is_the_last_gpu_verdicts_else_the_last_named(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        assert store.briefs.environment() == {}
        none, cpu = add(store, "none"), add(store, "cpu")
        store.record_verdict(none, timed(1.0))
        assert store.briefs.environment() == {}
        store.record_verdict(cpu, timed(1.0, CPU))
        assert store.briefs.environment() == CPU
        gpu, later_cpu = add(store, "gpu"), add(store, "later-cpu")
        store.record_verdict(gpu, timed(1.0, GPU))
        store.record_verdict(later_cpu, timed(1.0, {"device": "cpu", "torch": "2.12.0"}))
        assert store.briefs.environment() == GPU


# -- full reads of the few a page shows ------------------------------------------


def test_ancestry_follows_first_parents_and_stops(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        root = add(store, "root")
        middle = add(store, "middle", parents=(root,))
        leaf = add(store, "leaf", parents=(middle, root))
        add(store, "other", parents=(root,))
        orphan = add(store, "orphan", parents=("c0404",))
        chain = store.ancestry(leaf, 100)
        assert sorted(chain) == [root, middle, leaf]
        assert chain[leaf].candidate.source.endswith("# leaf\n")  # read in full
        assert sorted(store.ancestry(leaf, 1)) == [middle, leaf]
        assert list(store.ancestry(orphan, 100)) == [orphan]
        assert store.ancestry("c0404", 100) == {}


def test_ancestry_of_a_cycle_ends(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        first, second = add(store, "first"), add(store, "second")
        store._database.query("UPDATE candidate SET parent_ids_json = ? WHERE id = ?",
                              (f'["{second}"]', first))
        store._database.query("UPDATE candidate SET parent_ids_json = ? WHERE id = ?",
                              (f'["{first}"]', second))
        assert sorted(store.ancestry(first, 10_000)) == [first, second]


def test_llm_calls_of_reads_only_those_candidates_calls(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        wanted, other = add(store, "wanted"), add(store, "other")
        ids = []
        for candidate in (wanted, other, wanted):
            call = store.start_llm_call("m", {"mode": "diff", "messages": [candidate]})
            store.finish_llm_call(call, f"reply for {candidate}", 1, 1, 0.0, 0.1,
                                  candidate_id=candidate)
            ids.append(call)
        calls = store.llm_calls_of([wanted])
        assert [call.id for call in calls] == [ids[0], ids[2]]
        assert calls[0].prompt == {"mode": "diff", "messages": [wanted]}
        assert store.llm_calls_of([]) == []


# -- indexes -------------------------------------------------------------------


def query_plan(store: RunStore, sql: str) -> str:
    return " ".join(row[3] for row in store._database.query("EXPLAIN QUERY PLAN " + sql))


def test_light_reads_go_through_covering_indexes(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        candidates = query_plan(store, "SELECT c.id, c.sequence, c.backend, c.origin, c.name,"
                                " c.parent_ids_json, c.island, c.cell_json, c.created_at,"
                                " c.state FROM candidate c ORDER BY c.sequence")
        calls = query_plan(store, "SELECT SUM(input_tokens + output_tokens), SUM(cost_usd)"
                           " FROM llm_call WHERE finished_at > 1.0 AND finished_at <= 2.0")
        own = query_plan(store, "SELECT candidate_id, SUM(cost_usd) FROM llm_call"
                         " WHERE candidate_id IN ('c0001') GROUP BY candidate_id")
    assert "COVERING INDEX candidate_brief" in candidates
    assert "COVERING INDEX llm_call_finished" in calls and "llm_call_spend" in own


def test_a_run_made_before_the_indexes_gains_them_and_reads_the_same(tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "add", "# task", {}) as store:
        fast, slow = add(store, "fast"), add(store, "slow")
        store.record_verdict(fast, timed(3.0))
        store.record_verdict(slow, timed(1.5))
        path = store.path
    raw = sqlite3.connect(path)
    for name in INDEXES:
        raw.execute(f"DROP INDEX {name}")
    raw.commit()
    raw.close()
    with RunStore.open(path.parent) as store:
        assert store.briefs.best().id == fast
        assert [brief.id for brief in store.briefs.candidates()] == [fast, slow]
        assert sum(store.totals().candidates_by_status.values()) == 2  # tallies kept
    present = {row[0] for row in sqlite3.connect(path.parent / DB_NAME).execute(
        "SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert set(INDEXES) <= present
