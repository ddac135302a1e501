"""A resumed run's start: its archive from the indexed columns (the live run's, speedup
intervals and all), its first LLM request before its judges (and torch) are ready, and a
judge that fails then ends it with why."""

import asyncio
import random
import threading
from pathlib import Path

import pytest

from kernelevo.budget import Budget
from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig
from kernelevo.config_file import budget_limits, resolve
from kernelevo.errors import ConfigError
from kernelevo.evaluate.verdict import Verdict, verdict_for
from kernelevo.run import driver, setup
from kernelevo.search.archive import Archive
from kernelevo.search.config import SearchConfig
from kernelevo.search.loop import Evolution
from kernelevo.store.run_store import RunStore
from tests.conftest import ROOT
from tests.fakes.openai_server import FakeOpenAIServer, Status

TASK = ROOT / "tests/fixtures/tasks/add.py"
CUDA_SEED = (ROOT / "tests/fixtures/candidates/honest_cuda_add.py").read_text()
CELLS = [("triton", fusion, tensor_cores, "direct", block)
         for fusion in ("0", "1") for tensor_cores in (False, True)
         for block in ("small", "large")]


def _verdict(rng: random.Random) -> Verdict:
    """Failures, CPU passes (no speedup) and passes with few speedups, so fitness ties."""
    draw = rng.random()
    if draw < 0.35:
        return verdict_for(rng.choice(["output_mismatch", "syntax_error", "forward_failed"]))
    if draw < 0.45:
        return verdict_for("passed")
    return verdict_for("passed", speedup_vs_eager=rng.choice([0.5, 0.9, 1.0, 1.3, 2.0, 2.5]))


def _generated_run(runs: Path, count: int, islands: int) -> Path:
    """A killed run of `count` candidates judged out of their order of creation."""
    rng = random.Random(7)
    config = setup.run_config(EvalConfig(device="cpu"),
                              SearchConfig(islands=islands, migration_interval=7), {},
                              budget_limits(resolve(None)))
    with RunStore.create(runs, "add", TASK.read_text(), config, run_id="run-g") as store:
        ids = [store.add_candidate(Candidate(f"# variant {index}\n", "triton", origin="llm"),
                                   island=rng.randrange(islands), cell=list(rng.choice(CELLS)))
               for index in range(count)]
        judged = ids[:-3]
        rng.shuffle(judged)
        for candidate_id in judged:
            store.record_verdict(candidate_id, _verdict(rng))
        store.mark_evaluating(ids[-1])  # judged when the run was killed: judged again
        store.set_status("running")
    return runs / "run-g"


def _state(archive: Archive) -> list:
    return [archive.additions] + [(island.elites, dict(island.failures))
                                  for island in archive.islands]


def test_resume_rebuilds_the_archive_a_replay_of_every_verdict_builds(tmp_path):
    run_dir = _generated_run(tmp_path / "runs", 400, islands=3)
    search = SearchConfig(islands=3, migration_interval=7)
    with RunStore.open(run_dir) as store:
        evolution = Evolution(store, [], search, Budget(), None)
        evolution.resume()
        replayed = Archive.replay(store.briefs.judged_in_order(),
                                  **evolution.archive.settings())
        pending = {item[2] for item in evolution.queue._items._queue}
        unjudged = {brief.id for brief in store.briefs.candidates() if brief.status is None}
    assert replayed.additions == 397
    assert sum(len(island.elites) for island in replayed.islands) > 10
    assert sum(island.failures.total() for island in replayed.islands) > 50
    assert _state(evolution.archive) == _state(replayed)
    assert [e.candidate_id for e in evolution.archive.elites()] == [
        e.candidate_id for e in replayed.elites()]
    assert len(unjudged) == 3 and len(pending) == 3 and pending == unjudged


class _NoisyJudge:
    """Passes every candidate at a random speedup that a rerun may move 10-40 %: many
    newcomers land inside an elite's interval, where the search calls them ties."""

    device = "cpu"

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def evaluate(self, candidate: Candidate) -> Verdict:
        speedup, spread = self.rng.uniform(1.0, 3.0), self.rng.uniform(0.1, 0.4)
        return verdict_for("passed", speedup_vs_eager=speedup, timing_measure="call",
                           speedup_ranges={"call": {"eager": [speedup / (1 + spread),
                                                              speedup * (1 + spread)]}})

    def prebuild(self, candidate: Candidate) -> None:
        return None


class _CopyingProposer:
    """Answers every call at once with a distinct copy of the seed: one cell per island."""

    def __init__(self) -> None:
        self.calls = 0

    async def propose(self, parent, inspirations, repair=False):
        from kernelevo.search.proposals import Proposal

        self.calls += 1
        return Proposal(candidate=Candidate(f"// copy {self.calls}\n{CUDA_SEED}", "cuda",
                                            origin="llm"))


def test_resume_rebuilds_the_live_archive_with_speedup_intervals(tmp_path):
    search = SearchConfig(backend="cuda", islands=3, migration_interval=4, tuner_variants=0,
                          llm_in_flight=2)
    with RunStore.create(tmp_path, "add", TASK.read_text(), {}) as store:
        live = Evolution(store, [_NoisyJudge(seed=5)], search, Budget(candidates=40),
                         _CopyingProposer())
        live.seed([Candidate(CUDA_SEED, "cuda", origin="seed")])
        asyncio.run(live.run())
        judged = store.briefs.judged_in_order()
        resumed = Evolution(store, [], search, Budget(), None)
        resumed.resume()
    assert len(judged) == 41 and all(j.speedup_vs_eager_high for j in judged)
    assert _state(resumed.archive) == _state(live.archive)
    assert any(e.fitness_high for island in resumed.archive.islands
               for e in island.elites.values())
    # Judged by points alone, the same verdicts would have made another archive.
    points = Archive.replay([j._replace(speedup_vs_eager_high=None) for j in judged],
                            **live.archive.settings())
    assert _state(points) != _state(live.archive)


def _run_to_resume(runs: Path, base_url: str) -> Path:
    """A killed run whose reference passed: a resume asks the LLM to improve it at once."""
    config = setup.run_config(EvalConfig(device="cpu"), SearchConfig(llm_in_flight=1),
                              {"models": {"fake-model": 1.0}, "base_url": base_url,
                               "api_key_env": "OPENAI_API_KEY"},
                              budget_limits(resolve(None)))
    task = setup.task_from_source(TASK.read_text(), name="add")
    with RunStore.create(runs, "add", task.source, config, run_id="run-s") as store:
        seed = store.add_candidate(setup.reference_seed(task), island=0, cell=["pytorch"])
        store.record_verdict(seed, verdict_for("passed"))
        store.set_status("running")
    return runs / "run-s"


def _resume_options(runs: Path) -> setup.EvolveOptions:
    return setup.evolve_options(resolve(None), runs_dir=runs, resume="run-s")


class _Judge:
    device = "cpu"

    def evaluate(self, candidate: Candidate) -> Verdict:
        return verdict_for("passed")

    def prebuild(self, candidate: Candidate) -> None:
        return None


def test_a_resumes_first_llm_request_goes_out_before_its_judges_are_ready(tmp_path,
                                                                          monkeypatch):
    asked = threading.Event()

    def answer(body: dict) -> Status:
        asked.set()
        return Status(400, message="refused on purpose")  # final: the run ends

    made = []

    def judges_after_the_request(*args, **kwargs) -> list:
        if not asked.wait(30):
            raise AssertionError("no LLM request came while the judges were being made")
        made.append(_Judge())
        return made

    monkeypatch.setattr(setup, "make_judges", judges_after_the_request)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with FakeOpenAIServer(default=answer) as server:
        runs = tmp_path / "runs"
        _run_to_resume(runs, server.base_url)
        result = driver.run_evolve(None, _resume_options(runs))
    assert result.outcome.status == "llm_failed" and "refused on purpose" in result.outcome.reason
    assert len(server.requests) >= 1 and len(made) == 1


def test_judges_that_fail_to_start_on_resume_end_the_run_with_their_error(tmp_path,
                                                                        monkeypatch):
    def no_judges(*args, **kwargs) -> list:
        raise ConfigError("--gpus 5: no visible GPU has index 5")

    monkeypatch.setattr(setup, "make_judges", no_judges)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with FakeOpenAIServer(default=Status(503)) as server:
        runs = tmp_path / "runs"
        run_dir = _run_to_resume(runs, server.base_url)
        with pytest.raises(ConfigError, match="no visible GPU has index 5"):
            driver.run_evolve(None, _resume_options(runs))
    with RunStore.open(run_dir) as store:
        assert store.run_info().status == "interrupted"
        (failed,) = store.events("failed")
        assert "ConfigError: --gpus 5: no visible GPU has index 5" in failed.payload["error"]


def test_without_a_cuda_driver_prompts_name_the_default_gpu(monkeypatch):
    def no_driver(name: str):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(setup.ctypes, "CDLL", no_driver)
    assert setup.gpu_name() == setup.DEFAULT_GPU_NAME
