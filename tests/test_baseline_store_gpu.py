"""Stored baseline times on the GPU: timed once before any candidate loads, probed for drift."""

import pytest

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.task import load_task
from tests.conftest import ROOT

pytestmark = pytest.mark.gpu

SOFTMAX = ROOT / "examples" / "softmax"  # 0.2 ms a call on an H100: timed beside each candidate
# A 4096-cubed fp32 GEMM: milliseconds a call on 64 MiB sets, so its baselines are stored
GEMM = ROOT / "examples" / "gemm_bias_relu"
CONFIG = EvalConfig(vary_shapes=False)


def evaluate(judge, example=SOFTMAX):
    return judge.evaluate(load_candidate(example / "triton_candidate.py"))


def test_a_short_tasks_baselines_are_timed_beside_each_candidate_with_paired_rounds():
    judge = Judge(load_task(str(SOFTMAX / "task.py")), CONFIG, standby=True)
    try:
        first, second = evaluate(judge), evaluate(judge)
    finally:
        judge.close()
    for verdict in (first, second):
        assert verdict.reason == "passed", verdict.message
        assert verdict.environment["baselines"] == "timed beside the candidate"
        for measure in ("gpu", "call"):
            low, high = verdict.speedup_ranges[measure]["eager"]
            gain = (verdict.measures[measure]["eager"].median_ms
                    / verdict.measures[measure]["candidate"].median_ms)
            assert low < gain < high
        # what each process held at its peak, for sizing lanes (suite/footprint.py)
        assert {"oracle", "worker"} <= set(verdict.gpu_peak_bytes), verdict.gpu_peak_bytes
        assert all(held > 0 for held in verdict.gpu_peak_bytes.values())
    # the compile's wait for the GPU is a step of its own, out of the compile's seconds
    assert "warmup_compile_gpu_wait" in first.phases_s, first.phases_s
    # surely too quick for stored times to stand in: none were taken for the store
    assert judge.baseline_store.get(judge.baseline_key) is None
    assert first.phases_s["warmup_baselines_store"] < 1.0


def test_the_first_worker_times_the_baselines_and_every_candidate_reads_them_beside_a_probe():
    judge = Judge(load_task(str(GEMM / "task.py")), CONFIG, standby=True)
    try:
        first, second = evaluate(judge, GEMM), evaluate(judge, GEMM)
    finally:
        judge.close()
    stored = judge.baseline_store.get(judge.baseline_key)
    assert stored is not None and stored.names == ["eager", "compile"]
    for verdict in (first, second):
        assert verdict.reason == "passed", verdict.message
        assert verdict.environment["baselines"] == f"stored at {stored.measured_at}"
        assert any(n.startswith("baseline times from the task's store") for n in verdict.notes)
        for measure in ("gpu", "call"):
            for name in ("eager", "compile"):
                assert verdict.measures[measure][name].median_ms == \
                    stored.measures[measure][name]["median_ms"]
    # The first evaluation's worker timed them in its warm-up; the second found them stored
    assert first.phases_s["warmup_baselines_store"] > 5 * second.phases_s["warmup_baselines_store"]


def test_a_drifted_probe_times_every_baseline_beside_the_candidate_and_drops_the_entry():
    judge = Judge(load_task(str(GEMM / "task.py")), CONFIG)
    try:
        assert evaluate(judge, GEMM).reason == "passed"
        stored = judge.baseline_store.get(judge.baseline_key)
        forged = {m: {n: {**s, "median_ms": s["median_ms"] * 3} for n, s in by_name.items()}
                  for m, by_name in stored.measures.items()}
        judge.baseline_store.put(judge.baseline_key, forged)
        verdict = evaluate(judge, GEMM)
    finally:
        judge.close()
    assert verdict.reason == "passed", verdict.message
    assert verdict.environment["baselines"] == "timed beside the candidate"
    assert any("had drifted" in n for n in verdict.notes), verdict.notes
    eager = verdict.measures["call"]["eager"].median_ms
    assert eager < 0.5 * forged["call"]["eager"]["median_ms"]  # timed now, not the forged one
    assert judge.baseline_store.get(judge.baseline_key) is None
