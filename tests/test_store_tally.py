"""Running totals kept by triggers: always equal to a full scan of the run."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import verdict_for
from kernelevo.store.run_store import RunStore
from kernelevo.store.records import Totals
from kernelevo.store.tally import scan_totals

SOURCE = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"


def scanned(store: RunStore) -> Totals:
    with store._database.transaction("DEFERRED") as db:
        return scan_totals(db)


def assert_matches_scan(store: RunStore) -> None:
    kept, scan = store.totals(), scanned(store)
    assert (kept.tokens_in, kept.tokens_out, kept.llm_calls) == (
        scan.tokens_in, scan.tokens_out, scan.llm_calls)
    assert kept.llm_calls_in_flight == scan.llm_calls_in_flight
    assert kept.cost_usd == pytest.approx(scan.cost_usd, abs=1e-9)
    assert kept.in_flight_cost_bound_usd == pytest.approx(scan.in_flight_cost_bound_usd, abs=1e-9)
    assert kept.candidates_by_status == scan.candidates_by_status
    # Worst cases and guesses apart from billed usage, an empty answer's included.
    assert kept.estimated_tokens == scan.estimated_tokens
    assert kept.estimated_usd == pytest.approx(scan.estimated_usd, abs=1e-9)


def random_run(store: RunStore, rng: random.Random, steps: int) -> None:
    """A mix of started, finished and failed calls, candidates and (re)judged verdicts."""
    started: list[int] = []
    candidates: list[str] = []
    for step in range(steps):
        action = rng.choice(["start", "start", "finish", "fail", "empty", "candidate",
                             "verdict"])
        if action == "start":
            bound = rng.choice([None, round(rng.uniform(0.001, 0.2), 4)])
            started.append(store.start_llm_call("m", {"n": step}, max_output_tokens=4000,
                                                cost_bound_usd=bound))
        elif action in ("finish", "fail", "empty") and started:
            call = started.pop(rng.randrange(len(started)))
            tokens_in, tokens_out = rng.randrange(5000), rng.randrange(4000)
            cost = round(rng.uniform(0, 0.1), 5)
            if action == "finish":
                store.finish_llm_call(call, "reply", tokens_in, tokens_out, cost, 1.0)
            elif action == "empty":  # answered with no content: billed, yet failed
                store.fail_llm_call(call, "no content", tokens_in, tokens_out, cost,
                                    response_text="")
            else:
                store.fail_llm_call(call, "HTTP 500", tokens_in, 0, cost)
        elif action == "candidate":
            candidates.append(store.add_candidate(Candidate(f"{SOURCE}# {step}\n", "triton")))
        elif action == "verdict" and candidates:
            status = rng.choice(["passed", "output_mismatch", "syntax_error"])
            store.record_verdict(rng.choice(candidates), verdict_for(status, "why"))


def test_totals_equal_a_full_scan_after_a_mix_of_calls_and_verdicts(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "t", "src", {})
    rng = random.Random(3)
    for _ in range(5):
        random_run(store, rng, 40)
        assert_matches_scan(store)
    assert store.totals().llm_calls_in_flight > 0


def test_totals_equal_a_full_scan_after_resume(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "t", "src", {})
    random_run(store, random.Random(5), 150)
    store.close()  # as if killed with calls in flight
    resumed = RunStore.open(store.path)
    assert resumed.interrupted_llm_calls()
    resumed.settle_interrupted_llm_calls()
    assert_matches_scan(resumed)
    assert resumed.totals().llm_calls_in_flight == 0
    random_run(resumed, random.Random(6), 60)
    assert_matches_scan(resumed)


def test_a_version_1_database_gains_tallies_filled_from_its_rows(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "t", "src", {})
    random_run(store, random.Random(7), 120)
    expected = scanned(store)
    store.close()
    raw = sqlite3.connect(store.path)
    raw.execute("DROP TABLE llm_call_tally")
    raw.execute("DROP TABLE candidate_tally")
    for (trigger,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        raw.execute(f"DROP TRIGGER {trigger}")
    raw.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()
    with RunStore.open(store.path) as upgraded:
        assert upgraded.totals().candidates_by_status == expected.candidates_by_status
        assert upgraded.totals().tokens_in == expected.tokens_in
        random_run(upgraded, random.Random(8), 60)
        assert_matches_scan(upgraded)


def test_an_empty_answer_s_billed_usage_is_no_estimate_but_a_cut_off_call_s_is(
        tmp_path: Path) -> None:
    with RunStore.create(tmp_path, "t", "src", {}) as store:
        empty = store.start_llm_call("m", {}, max_output_tokens=100, cost_bound_usd=0.01)
        store.fail_llm_call(empty, "no content", 30, 5, 0.001, response_text="")
        cut = store.start_llm_call("m", {}, max_output_tokens=100, cost_bound_usd=0.01)
        store.fail_llm_call(cut, "timeout (charged the call's worst case)", 900, 100, 0.01)
        totals = store.totals()
        assert totals.tokens_in + totals.tokens_out == 1_035
        assert (totals.estimated_tokens, totals.estimated_usd) == (1_000, 0.01)
        assert_matches_scan(store)
