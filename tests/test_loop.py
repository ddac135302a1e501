"""The search loop's scheduling, with judges faked at their seam (no processes)."""

import asyncio
import threading
import time

import pytest

from kernelevo.budget import Budget
from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import TimingStats, verdict_for
from kernelevo.search.config import SearchConfig
from kernelevo.search.loop import Evolution
from kernelevo.search.outcome import RunOutcome
from kernelevo.store.run_store import RunStore
from tests.conftest import ROOT

CUDA_SEED = (ROOT / "tests/fixtures/candidates/honest_cuda_add.py").read_text()


class FakeJudge:
    """Passes everything after a short delay; records the order of builds and judgements."""

    def __init__(self, device: str, log: list, speedup: float = 1.5, delay_s: float = 0.01) -> None:
        self.device, self.log, self.speedup, self.delay_s = device, log, speedup, delay_s
        self.lock = threading.Lock()

    def prebuild(self, candidate):
        with self.lock:
            self.log.append(("build", candidate.source_hash))
        time.sleep(0.01)
        return 0.01

    def evaluate(self, candidate):
        with self.lock:
            self.log.append(("judge", candidate.source_hash))
            # Each judged candidate is a little faster, so each becomes an elite.
            self.speedup += 0.1
            speedup = self.speedup
        time.sleep(self.delay_s)
        stats = TimingStats(1.0 / speedup, 0.01, 0.9, 20)
        return verdict_for("passed", timings={"candidate": stats}, speedup_vs_eager=speedup)


def run(tmp_path, device, candidates_limit):
    store = RunStore.create(tmp_path, "add", "source", {})
    log: list = []
    judges = [FakeJudge(device, log), FakeJudge(device, log)]
    evolution = Evolution(store, judges, SearchConfig(backend="cuda", tuner_variants=2),
                          Budget(candidates=candidates_limit), proposer=None)
    evolution.seed([Candidate(CUDA_SEED, "cuda", origin="seed")])
    progress = asyncio.run(evolution.run())
    return store, log, progress


def test_cuda_candidates_are_built_ahead_then_judged(tmp_path):
    store, log, progress = run(tmp_path, "cuda", candidates_limit=4)
    built = [h for kind, h in log if kind == "build"]
    judged = [h for kind, h in log if kind == "judge"]
    assert set(judged) == set(built) and len(judged) == len(store.candidates())
    for source_hash in judged:
        assert log.index(("build", source_hash)) < log.index(("judge", source_hash))
    # The tuner alone runs until its neighbourhood is explored or the budget is spent.
    assert progress.message.startswith(("candidate budget", "nothing left"))
    assert progress.outcome.status in ("budget_spent", "finished")
    assert progress.outcome.reason == progress.message and not progress.outcome.failed
    origins = [c.candidate.origin for c in store.candidates()]
    assert 2 <= origins.count("tuner") <= 4
    assert len({c.candidate.source_hash for c in store.candidates()}) == len(origins)
    assert progress.best_vs_eager > 1.5


def test_without_gpu_nothing_is_built_ahead(tmp_path):
    store, log, progress = run(tmp_path, "cpu", candidates_limit=2)
    assert all(kind == "judge" for kind, _ in log)
    assert all(c.verdict is not None for c in store.candidates())


class ScriptedProposer:
    """Answers every call at once with a distinct copy of the seed (a comment differs)."""

    def __init__(self) -> None:
        self.calls = 0

    async def propose(self, parent, inspirations, repair=False):
        from kernelevo.search.proposals import Proposal

        self.calls += 1
        await asyncio.sleep(0.005)
        return Proposal(candidate=Candidate(f"// llm {self.calls}\n{CUDA_SEED}", "cuda",
                                            origin="llm"))


def test_queued_tuner_variants_neither_block_nor_delay_llm_proposals(tmp_path):
    store = RunStore.create(tmp_path, "add", "source", {})
    log: list = []
    # Every verdict is faster than the last, so every candidate is an elite and
    # every elite is tuned: tuner variants alone would keep the queue full.
    judge = FakeJudge("cpu", log, delay_s=0.1)
    proposer = ScriptedProposer()
    evolution = Evolution(store, [judge], SearchConfig(backend="cuda", tuner_variants=6,
                                                       llm_in_flight=1, queued_per_worker=2),
                          Budget(candidates=30), proposer=proposer)
    evolution.seed([Candidate(CUDA_SEED, "cuda", origin="seed")])
    asyncio.run(evolution.run())
    stored = store.candidates()
    origins = [c.candidate.origin for c in stored]
    assert origins.count("llm") >= 8 and origins.count("tuner") >= 1
    # An LLM candidate overtakes tuner variants queued before it.
    judged_at = {h: i for i, (kind, h) in enumerate(log) if kind == "judge"}
    overtaken = [(t, c) for c in stored if c.candidate.origin == "llm"
                 for t in stored if t.candidate.origin == "tuner" and t.sequence < c.sequence
                 and judged_at[t.candidate.source_hash] > judged_at[c.candidate.source_hash]]
    assert overtaken


def test_judge_queue_serves_urgent_candidates_first_in_order():
    from kernelevo.search.queue import JudgeQueue

    async def drain():
        queue = JudgeQueue()
        for name, origin in [("t1", "tuner"), ("l1", "llm"), ("t2", "tuner"), ("l2", "seed")]:
            queue.put(name, origin)
        assert queue.urgent == 2 and queue.qsize() == 4
        got = [await queue.get() for _ in range(4)]
        assert queue.urgent == 0 and queue.empty()
        return got

    assert asyncio.run(drain()) == ["l1", "l2", "t1", "t2"]


class SeedOnlyFastJudge(FakeJudge):
    """The seed is fast; every variant is slower, so no variant becomes an elite."""

    def evaluate(self, candidate):
        with self.lock:
            self.log.append(("judge", candidate.source_hash))
        speedup = 2.0 if candidate.origin == "seed" else 1.0
        stats = TimingStats(1.0 / speedup, 0.01, 0.9, 20)
        return verdict_for("passed", timings={"candidate": stats}, speedup_vs_eager=speedup)


def test_tuner_alone_keeps_trying_the_best_kernel_until_the_budget_is_spent(tmp_path):
    source = (ROOT / "examples/gemm_bias_relu/triton_candidate.py").read_text()
    store = RunStore.create(tmp_path, "gemm", "source", {})
    evolution = Evolution(store, [SeedOnlyFastJudge("cpu", [])],
                          SearchConfig(backend="triton", tuner_variants=2),
                          Budget(candidates=10), proposer=None)
    evolution.seed([Candidate(source, "triton", origin="seed")])
    progress = asyncio.run(evolution.run())
    stored = store.candidates()
    assert [c.candidate.origin for c in stored].count("tuner") == 10
    # Two variants per round: the seed, the fittest, was tuned again and again.
    assert sum(c.candidate.parent_ids == (stored[0].id,) for c in stored) > 2
    assert progress.message.startswith("candidate budget")
    assert progress.outcome == RunOutcome("budget_spent", progress.message)
    (stop,) = store.events("stop")
    assert stop.payload == {"status": "budget_spent", "reason": progress.message}


def test_a_task_that_dies_ends_the_run_as_error_instead_of_hanging(tmp_path):
    store = RunStore.create(tmp_path, "add", "source", {})
    evolution = Evolution(store, [FakeJudge("cpu", [])], SearchConfig(backend="cuda"),
                          Budget(candidates=3), proposer=None)
    evolution.seed([Candidate(CUDA_SEED, "cuda", origin="seed")])

    def broken_record(candidate_id, verdict):
        raise OSError("disk full")

    store.record_verdict = broken_record
    progress = asyncio.run(asyncio.wait_for(evolution.run(), 30))
    assert progress.outcome.status == "error" and progress.outcome.failed
    assert "judge task failed" in progress.outcome.reason
    assert "disk full" in progress.outcome.reason
    assert store.events("task_error")[0].payload["role"] == "judge"


def test_run_outcome_statuses_are_checked():
    with pytest.raises(ValueError, match="outcome status 'done'"):
        RunOutcome("done", "why")


def test_each_migration_is_logged_once(tmp_path):
    store = RunStore.create(tmp_path, "add", "source", {})
    judge = FakeJudge("cpu", [])
    config = SearchConfig(backend="cuda", tuner_variants=3, islands=2, migration_interval=3)
    evolution = Evolution(store, [judge], config, Budget(candidates=12), proposer=None)
    evolution.seed([Candidate(CUDA_SEED, "cuda", origin="seed")])
    asyncio.run(evolution.run())
    judged = sum(1 for c in store.candidates() if c.verdict is not None)
    assert judged >= 6
    assert len(store.events("migration")) == judged // 3


def test_the_elapsed_time_shown_is_the_runs_own_clock_the_one_stored(tmp_path):
    """A resumed run's progress counts its earlier time, as show and the report do."""
    store = RunStore.create(tmp_path, "add", "source", {})
    budget = Budget(candidates=2)
    budget.restore(0, 0.0, 0, elapsed_s=100.0)  # 100 s spent before a resume
    evolution = Evolution(store, [FakeJudge("cpu", [])], SearchConfig(backend="cuda"), budget,
                          proposer=None)
    evolution.seed([Candidate(CUDA_SEED, "cuda", origin="seed")])
    progress = asyncio.run(evolution.run())
    stored = max(event.payload["elapsed_s"] for event in store.events("elapsed"))
    assert 100.0 <= progress.elapsed_s < 130.0
    assert abs(progress.elapsed_s - stored) < 1.0
