"""The run store: round trips, resume helpers, crash safety, threads."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import kernelevo
from kernelevo.candidate import Candidate
from kernelevo.errors import StoreError
from kernelevo.evaluate.verdict import ErrorMetrics, TimingStats, Verdict, verdict_for
from kernelevo.store.run_store import DB_NAME, RunStore, rank_candidates
from kernelevo.store.listing import list_runs
from kernelevo.store.tables import SCHEMA_VERSION

SOURCE = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"


def make_store(tmp_path: Path, task_name: str = "level1/19") -> RunStore:
    config = {"backend": "triton", "seed": 7}
    return RunStore.create(tmp_path, task_name, "class Model: ...", config)


def ok_verdict(speedup: float, runtime_ms: float = 1.0) -> Verdict:
    timing = TimingStats(median_ms=runtime_ms, iqr_ms=0.01, min_ms=runtime_ms * 0.9, samples=100)
    return verdict_for(
        "passed",
        speedup_vs_eager=speedup,
        speedup_vs_compile=speedup / 2,
        timings={"candidate": timing, "eager": TimingStats(2.0, 0.02, 1.9, 100)},
        flags=("degenerate_output",),
        phases_s={"compile": 1.5},
    )


def add(store: RunStore, text: str = "", **kwargs) -> str:
    return store.add_candidate(Candidate(source=SOURCE + text, backend="triton"), **kwargs)


# -- create, open, list -------------------------------------------------------


def test_create_sets_pragmas_schema_and_run_row(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    assert store.path == tmp_path / store.run_id / DB_NAME
    info = store.run_info()
    assert (info.task_name, info.status, info.finished_at) == ("level1/19", "running", None)
    assert info.config == {"backend": "triton", "seed": 7}
    raw = sqlite3.connect(store.path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    version = raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    assert int(version) == SCHEMA_VERSION
    foreign_keys = store._database.query("PRAGMA foreign_keys")[0][0]
    synchronous = store._database.query("PRAGMA synchronous")[0][0]
    assert (foreign_keys, synchronous) == (1, 2)  # 2 is FULL


def test_open_by_directory_or_file_and_reopen_is_idempotent(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    candidate_id = add(store)
    store.close()
    for target in (store.path.parent, store.path, str(store.path.parent)):
        with RunStore.open(target) as reopened:
            assert reopened.run_id == store.run_id
            assert [c.id for c in reopened.candidates()] == [candidate_id]


def test_open_refuses_missing_and_newer_databases(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no run database"):
        RunStore.open(tmp_path / "nope")
    store = make_store(tmp_path)
    store.close()
    raw = sqlite3.connect(store.path)
    newer = str(SCHEMA_VERSION + 1)
    raw.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (newer,))
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match="upgrade KernelEvo"):
        RunStore.open(store.path)


def test_create_refuses_an_existing_run_id(tmp_path: Path) -> None:
    RunStore.create(tmp_path, "t", "src", {}, run_id="same").close()
    with pytest.raises(StoreError, match="exists"):
        RunStore.create(tmp_path, "t", "src", {}, run_id="same")


def test_list_runs_summarises_each_run_and_flags_broken_ones(tmp_path: Path) -> None:
    first = RunStore.create(tmp_path, "level1/19", "src", {}, run_id="a-run")
    add(first)
    first.record_verdict("c0001", ok_verdict(2.5))
    first.set_status("finished")
    second = RunStore.create(tmp_path, "level2/76", "src", {}, run_id="b-run")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / DB_NAME).write_bytes(b"not a database at all" * 100)
    summaries = {summary.run_id: summary for summary in list_runs(tmp_path)}
    assert set(summaries) == {"a-run", "b-run", "broken"}
    assert summaries["a-run"].status == "finished"
    assert summaries["a-run"].best_speedup_vs_eager == 2.5
    assert summaries["a-run"].best_id == "c0001"
    assert summaries["a-run"].candidates == 1
    assert summaries["b-run"].task_name == "level2/76"
    assert summaries["broken"].problem
    assert list_runs(tmp_path / "missing") == []
    second.close()


def test_set_status_records_and_clears_finished_at(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.set_status("interrupted")
    assert store.run_info().finished_at is not None
    store.set_status("running")
    assert store.run_info().finished_at is None
    with pytest.raises(StoreError, match="unknown run status"):
        store.set_status("paused")


# -- candidates and verdicts ---------------------------------------------------


def test_candidate_and_verdict_round_trip(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    parent = add(store, "# parent")
    child = store.add_candidate(
        Candidate(source=SOURCE, backend="cuda", name="fast", origin="llm"),
        island=2,
        cell=("cuda", "1", True, "staged", "medium"),
        parent_ids=[parent],
        inspiration_ids=("c0009",),
    )
    assert (parent, child) == ("c0001", "c0002")
    verdict = verdict_for(
        "output_mismatch",
        errors=ErrorMetrics(0.5, 0.1, 0.01, 0.02, worst_index=(3, 4), atol=1e-4, rtol=1e-4),
        logs="mismatch at [3, 4]",
    )
    store.mark_evaluating(child)
    assert store.candidate(child).state == "evaluating"
    store.record_verdict(child, verdict)
    stored = store.candidate(child)
    assert stored.verdict == verdict
    assert stored.state == "evaluated" and stored.evaluation_attempts == 1
    assert stored.candidate == Candidate(SOURCE, "cuda", "fast", "llm", (parent,))
    assert stored.cell == ("cuda", "1", True, "staged", "medium")
    assert (stored.island, stored.inspiration_ids) == (2, ("c0009",))
    assert store.find_by_hash(stored.candidate.source_hash).id == child
    assert store.find_by_hash("0" * 64) is None


def test_ok_verdict_round_trip_and_columns(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    candidate_id = add(store)
    verdict = ok_verdict(3.0, runtime_ms=0.25)
    store.record_verdict(candidate_id, verdict)
    assert store.candidate(candidate_id).verdict == verdict
    assert Verdict.from_dict(json.loads(json.dumps(verdict.to_dict()))) == verdict
    row = store._database.query("SELECT * FROM verdict")[0]
    assert (row["status"], row["reason"], row["runtime_ms"]) == ("ok", "passed", 0.25)
    assert (row["speedup_vs_eager"], row["speedup_vs_compile"]) == (3.0, 1.5)


def test_unknown_ids_are_refused(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    with pytest.raises(StoreError, match="c0404"):
        store.mark_evaluating("c0404")
    with pytest.raises(StoreError, match="c0404"):
        store.record_verdict("c0404", ok_verdict(1.0))
    with pytest.raises(StoreError, match="no candidate"):
        store.candidate("c0404")
    call = store.start_llm_call("m", "prompt")
    with pytest.raises(sqlite3.IntegrityError):  # foreign keys are on
        store.finish_llm_call(call, "reply", 1, 1, 0.0, 0.1, candidate_id="c0404")
    assert store.interrupted_llm_calls()[0].id == call  # the failed write left nothing behind


def test_best_counts_only_ok_verdicts(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    assert store.best() is None
    slow, fast, wrong = add(store, "#1"), add(store, "#2"), add(store, "#3")
    store.record_verdict(slow, ok_verdict(1.2, runtime_ms=2.0))
    store.record_verdict(fast, ok_verdict(4.0, runtime_ms=0.5))
    store.record_verdict(wrong, verdict_for("output_mismatch", speedup_vs_eager=50.0))
    assert store.best().id == fast
    assert store.best().verdict.speedup_vs_eager == 4.0  # read in full


def test_the_pytorch_baseline_and_flagged_candidates_are_never_best(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    seed = store.add_candidate(Candidate(SOURCE, backend="pytorch", origin="seed"))
    store.record_verdict(seed, ok_verdict(9.0))
    flagged = add(store, "# PyTorch ops under a triton label")
    store.record_verdict(flagged, verdict_for("passed", speedup_vs_eager=8.0,
                                              flags=("no_custom_kernel",)))
    ranking = store.ranking()
    assert store.best() is None and ranking.baseline.id == seed
    assert (ranking.judged, ranking.failed, ranking.not_kernels) == (1, 0, 1)
    kernel = add(store, "# a real kernel")
    store.record_verdict(kernel, ok_verdict(0.5))  # slower than eager, still the best kernel
    assert store.best().id == kernel and store.ranking().timed


def test_ranking_from_the_light_query_matches_the_full_candidates(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.add_candidate(Candidate(SOURCE, backend="pytorch", origin="seed"))
    ids = [add(store, f"#{n}") for n in range(4)]
    store.record_verdict(ids[0], verdict_for("passed"))  # untimed
    store.record_verdict(ids[1], verdict_for("passed", speedup_vs_eager=2.0,
                                             message="no_custom_kernel is not a flag here"))
    store.record_verdict(ids[2], verdict_for("passed", speedup_vs_eager=3.0,
                                             flags=("no_custom_kernel",)))
    assert store.ranking() == rank_candidates(store.candidates())
    assert [entry.id for entry in store.ranking().kernels] == [ids[1], ids[0]]
    assert store.ranking().pending == 1


def test_candidates_filter_by_state(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    first, second, third = add(store, "#1"), add(store, "#2"), add(store, "#3")
    store.mark_evaluating(second)
    store.record_verdict(third, ok_verdict(1.0))
    assert [c.id for c in store.candidates()] == [first, second, third]
    assert [c.id for c in store.candidates("proposed")] == [first]
    assert [c.id for c in store.candidates("evaluated")] == [third]


# -- LLM ledger, totals, events --------------------------------------------------


def test_totals_sum_calls_and_count_outcomes(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    prompt = [{"role": "user", "content": "make it fast"}]
    finished = store.start_llm_call("gpt-x", prompt, max_output_tokens=4000, cost_bound_usd=0.05)
    failed = store.start_llm_call("gpt-x", prompt)
    store.start_llm_call("gpt-y", prompt, max_output_tokens=4000, cost_bound_usd=0.07)
    candidate_id = add(store)
    store.finish_llm_call(finished, "```python```", 1000, 500, 0.01, 2.5, candidate_id=candidate_id)
    store.fail_llm_call(failed, "HTTP 429", input_tokens=10, cost_usd=0.001)
    add(store, "#2")
    store.record_verdict(candidate_id, ok_verdict(2.0))
    totals = store.totals()
    assert (totals.tokens_in, totals.tokens_out, totals.llm_calls) == (1010, 500, 3)
    assert totals.cost_usd == pytest.approx(0.011)
    assert totals.candidates_by_status == {"ok": 1, "unevaluated": 1}
    assert (totals.llm_calls_in_flight, totals.in_flight_cost_bound_usd) == (1, 0.07)
    calls = store.llm_calls()
    assert calls[0].prompt == prompt and calls[0].candidate_id == candidate_id
    assert (calls[1].state, calls[1].error) == ("failed", "HTTP 429")
    with pytest.raises(StoreError, match="started LLM call"):
        store.finish_llm_call(finished, "again", 1, 1, 0.0, 0.0)


def test_link_llm_call_attaches_candidate(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    call = store.start_llm_call("m", "p")
    store.finish_llm_call(call, "reply", 5, 6, 0.0, 0.1)
    candidate_id = add(store)
    store.link_llm_call(call, candidate_id)
    assert store.llm_calls()[0].candidate_id == candidate_id


def test_events_in_order_with_filters(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    first = store.log_event("progress", {"candidates": 1})
    store.log_event("budget", {"left_usd": 1.5})
    store.log_event("progress", {"candidates": 2})
    assert [e.kind for e in store.events()] == ["progress", "budget", "progress"]
    assert [e.payload for e in store.events("progress")] == [{"candidates": 1}, {"candidates": 2}]
    assert [e.payload for e in store.events(after_id=first)][0] == {"left_usd": 1.5}


# -- resume ----------------------------------------------------------------------


def test_pending_and_interrupted_calls_survive_reopen(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    proposed, evaluating, done = add(store, "#1"), add(store, "#2"), add(store, "#3")
    store.mark_evaluating(evaluating)
    store.record_verdict(done, ok_verdict(1.1))
    cut_off = store.start_llm_call("m", "p", max_output_tokens=8000, cost_bound_usd=0.12)
    unbounded = store.start_llm_call("m", "p")
    store.close()  # as if the process had died here

    resumed = RunStore.open(store.path)
    pending = resumed.pending()
    assert [(c.id, c.state, c.evaluation_attempts) for c in pending] == [
        (proposed, "proposed", 0),
        (evaluating, "evaluating", 1),
    ]
    assert [call.id for call in resumed.interrupted_llm_calls()] == [cut_off, unbounded]
    assert resumed.settle_interrupted_llm_calls() == pytest.approx(0.12)
    assert resumed.interrupted_llm_calls() == []
    totals = resumed.totals()
    assert totals.cost_usd == pytest.approx(0.12) and totals.tokens_out == 8000
    assert {call.state for call in resumed.llm_calls()} == {"failed"}


CHILD = """
import sys
from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import verdict_for
from kernelevo.store.run_store import RunStore
store = RunStore.open(sys.argv[1])
index = 0
while True:
    index += 1
    call = store.start_llm_call("m", {"index": index})
    candidate_id = store.add_candidate(Candidate(source="x = %d" % index, backend="triton"))
    store.finish_llm_call(call, "reply", 10, 20, 0.001, 0.1, candidate_id=candidate_id)
    store.mark_evaluating(candidate_id)
    store.record_verdict(candidate_id, verdict_for("passed", speedup_vs_eager=1.0 + index))
    print(candidate_id, flush=True)
"""


def test_sigkill_mid_write_leaves_a_consistent_database(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.close()
    environment = dict(os.environ, PYTHONPATH=str(Path(kernelevo.__file__).parents[1]))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(store.path)],
        stdout=subprocess.PIPE,
        env=environment,
        text=True,
    )
    watchdog = threading.Timer(60, child.kill)  # a stuck child fails the test, never hangs it
    watchdog.start()
    committed = [child.stdout.readline().strip() for _ in range(25)]
    watchdog.cancel()
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    child.stdout.close()
    assert all(committed), "the writer died before committing 25 candidates"

    raw = sqlite3.connect(store.path)
    assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
    raw.close()
    with RunStore.open(store.path) as reopened:
        candidates = reopened.candidates()
        ids = [c.id for c in candidates]
        assert set(committed) <= set(ids)
        assert [c.sequence for c in candidates] == list(range(1, len(candidates) + 1))
        for stored in candidates:
            assert (stored.state == "evaluated") == (stored.verdict is not None)
        assert len(reopened.pending()) <= 1  # only the candidate being written at the kill
        for call in reopened.llm_calls("finished"):
            assert call.candidate_id in ids


def test_concurrent_writes_from_four_threads(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    per_thread = 40
    created: list[list[str]] = [[] for _ in range(4)]
    failures: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for index in range(per_thread):
                call = store.start_llm_call("m", f"{worker}-{index}")
                candidate_id = add(store, f"# {worker}-{index}", island=worker)
                store.finish_llm_call(call, "r", 1, 2, 0.5, 0.0, candidate_id=candidate_id)
                store.record_verdict(candidate_id, ok_verdict(1.0 + index))
                store.log_event("progress", {"worker": worker})
                created[worker].append(candidate_id)
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    all_ids = [candidate_id for ids in created for candidate_id in ids]
    assert len(set(all_ids)) == 4 * per_thread
    totals = store.totals()
    assert totals.candidates_by_status == {"ok": 4 * per_thread}
    assert (totals.llm_calls, totals.tokens_in, totals.tokens_out) == (160, 160, 320)
    assert totals.cost_usd == pytest.approx(80.0)
    assert len(store.events("progress")) == 4 * per_thread
    assert sorted(c.sequence for c in store.candidates()) == list(range(1, 161))
