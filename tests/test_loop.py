"""The search loop's scheduling, with judges faked at their seam (no processes)."""

import asyncio
import threading
import time

from kernelevo.budget import Budget
from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import TimingStats, verdict_for
from kernelevo.search.loop import Evolution, SearchConfig
from kernelevo.store import RunStore
from tests.conftest import ROOT

CUDA_SEED = (ROOT / "tests/fixtures/candidates/honest_cuda_add.py").read_text()


class FakeJudge:
    """Passes everything after a short delay; records the order of builds and judgements."""

    def __init__(self, device: str, log: list, speedup: float = 1.5) -> None:
        self.device, self.log, self.speedup = device, log, speedup
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
        time.sleep(0.01)
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
    origins = [c.candidate.origin for c in store.candidates()]
    assert 2 <= origins.count("tuner") <= 4
    assert len({c.candidate.source_hash for c in store.candidates()}) == len(origins)
    assert progress.best_vs_eager > 1.5


def test_without_gpu_nothing_is_built_ahead(tmp_path):
    store, log, progress = run(tmp_path, "cpu", candidates_limit=2)
    assert all(kind == "judge" for kind, _ in log)
    assert all(c.verdict is not None for c in store.candidates())
