"""The profile reaches the model's prompt, and the search stops at the roofline when asked."""

from __future__ import annotations

import asyncio
import random

from kernelevo.budget import Budget
from kernelevo.candidate import Candidate
from kernelevo.evaluate.analysis.profile import (CALL_ANNOTATION, Cost, TraceEvent, breakdown,
                                                 build_profile)
from kernelevo.evaluate.verdict import TimingStats, verdict_for
from kernelevo.llm import ClientConfig, ModelPool
from kernelevo.propose.prompt import PROFILE_MAX_CHARS
from kernelevo.search.config import SearchConfig
from kernelevo.search.loop import Evolution
from kernelevo.search.proposals import LLMProposer
from kernelevo.store.run_store import RunStore
from tests.conftest import ROOT
from tests.fakes import FakeOpenAIServer

TASK_SOURCE = (ROOT / "tests/fixtures/tasks/add.py").read_text()
SEED = (ROOT / "tests/fixtures/candidates/honest_add.py").read_text()
FAST = {"backoff_base_s": 0.01, "backoff_max_s": 0.02, "max_attempts": 2}
BYTES = 3 * 4096 * 4096 * 4  # two inputs and an output of fp32


def _profile(fraction: float):
    """A profile at `fraction` of the H200's HBM peak: one own kernel and two copies."""
    time_ms = BYTES / (fraction * 4800e9) * 1e3
    kernel_us = time_ms * 1e3
    events = [TraceEvent(CALL_ANNOTATION, "user_annotation", 0, kernel_us * 1.2),
              TraceEvent("add_kernel", "kernel", 1, kernel_us * 0.8, (4096, 1, 1), (1024, 1, 1)),
              TraceEvent("copy_kernel_a", "kernel", 2 + kernel_us * 0.8, kernel_us * 0.1),
              TraceEvent("copy_kernel_b", "kernel", 3 + kernel_us * 0.9, kernel_us * 0.05)]
    return time_ms, build_profile(breakdown(events, ("add_kernel",)), Cost(BYTES, 0, BYTES // 12),
                                  time_ms, "NVIDIA H200", "float32", {"compile": 1.0})


class ProfiledJudge:
    """Passes every candidate with a profile at a fixed roofline fraction."""

    device = "cpu"

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction

    def prebuild(self, candidate):
        return 0.0

    def evaluate(self, candidate):
        time_ms, profile = _profile(self.fraction)
        stats = TimingStats(time_ms, 0.001, time_ms, 20)
        return verdict_for("passed", timings={"candidate": stats}, speedup_vs_eager=1.5,
                           profile=profile)


def _run(tmp_path, server, fraction: float, **search):
    store = RunStore.create(tmp_path, "add", TASK_SOURCE, {})
    budget = Budget(candidates=search.pop("candidates", 3))
    config = ClientConfig(base_url=server.base_url, model="fake-model", **FAST)
    pool = ModelPool.from_models(config, {"fake-model": 1.0}, budget=budget, max_in_flight=1)
    proposer = LLMProposer(pool, store, TASK_SOURCE, "triton", "fp32", 256, random.Random(0),
                           diff_probability=0.0)
    evolution = Evolution(store, [ProfiledJudge(fraction)],
                          SearchConfig(llm_in_flight=1, tuner_variants=0, **search), budget,
                          proposer)
    evolution.seed([Candidate(SEED, "triton", origin="seed")])

    async def go():
        try:
            return await asyncio.wait_for(evolution.run(), 60)
        finally:
            await pool.aclose()

    return asyncio.run(go()), store


def test_the_parent_prompt_carries_bound_headroom_and_top_kernels_within_its_bound(tmp_path):
    answer = f"faster:\n\n```python\n{SEED}\n```\n"
    with FakeOpenAIServer(default=answer) as server:
        _run(tmp_path, server, 0.41, candidates=1)
        requests = server.requests
    user = requests[0].body["messages"][-1]["content"]
    section = user.split("profile (where the time goes", 1)[1].split("\n\n", 1)[0]
    assert "bottleneck: memory-bound at 41 % of HBM peak: at most 2.4x left" in section
    assert "3 kernels where the reference fuses to 1 under torch.compile" in section
    assert "add_kernel (own): 84 %" in section and "copy_kernel_a" in section
    assert "grid 4096x1x1 block 1024x1x1" in section
    assert len(section) <= PROFILE_MAX_CHARS
    # the speed instructions name the bottleneck
    assert "Its bottleneck, by the profile: memory-bound at 41 %" in user


def test_stop_at_roofline_ends_the_search_at_a_kernel_near_its_ceiling(tmp_path):
    with FakeOpenAIServer(default=f"```python\n{SEED}\n```") as server:
        progress, store = _run(tmp_path, server, 0.95, candidates=5, stop_at_roofline=0.9)
        asked = len(server.requests)
    assert progress.outcome.status == "finished"
    assert progress.outcome.reason.startswith("roofline reached: a kernel runs at 95 % of its "
                                              "memory ceiling (stop at 90 %)")
    assert store.events("roofline_reached")
    assert asked <= 1  # stopped after the seed's verdict, not after the budget
    elite = store.events("elite")[0].payload
    assert elite["bound"] == "memory" and elite["roofline"] == 0.95


def test_a_kernel_below_the_roofline_threshold_does_not_stop_the_search(tmp_path):
    with FakeOpenAIServer(default=f"```python\n{SEED}\n```") as server:
        progress, store = _run(tmp_path, server, 0.5, candidates=2, stop_at_roofline=0.9)
    assert not store.events("roofline_reached")
    assert not progress.outcome.reason.startswith("roofline reached")


def test_inspirations_carry_the_diagnosis_and_a_cpu_profile_adds_no_section():
    from kernelevo.evaluate.analysis.profile import NO_GPU_NOTE, Profile
    from kernelevo.propose.prompt import Exemplar, PromptRequest, build_messages

    judge = ProfiledJudge(0.41)
    profiled = judge.evaluate(None)
    on_cpu = verdict_for("passed", profile=Profile(notes=(NO_GPU_NOTE,)))
    request = PromptRequest(TASK_SOURCE, "triton", "fp32", "rewrite",
                            Exemplar("c1", SEED, on_cpu), (Exemplar("c2", SEED, profiled),))
    user = build_messages(request)[-1]["content"]
    assert "profile (where the time goes" not in user
    assert "Its bottleneck" not in user
    assert ("## `c2`: ok, 0.1023 ms, 1.50x vs eager, memory-bound at 41 % of HBM peak: "
            "at most 2.4x left\n") in user
