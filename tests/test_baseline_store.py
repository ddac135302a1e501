"""The task's stored baseline times: keys, disk and memory, fresh stores, the drift probe (CPU)."""

import json
from dataclasses import replace

import pytest

from kernelevo.config import TimingConfig
from kernelevo.evaluate.analysis.baseline_drift import DRIFT, drift, steady, with_stored
from kernelevo.evaluate.parent.baseline_store import BaselineStore, store_key


def stats(median_ms: float) -> dict:
    return {"median_ms": median_ms, "iqr_ms": 0.01, "min_ms": median_ms, "samples": 20,
            "method": "events", "mean_ms": median_ms}


STORED = {"gpu": {"eager": stats(2.0), "compile": stats(1.5)},
          "call": {"eager": stats(2.2), "compile": stats(1.6)}}


def test_the_key_holds_the_task_precision_timing_settings_and_libraries(monkeypatch):
    import torch

    timing = TimingConfig()
    key = store_key("source", "fp32", timing)
    assert store_key("source", "fp32", TimingConfig()) == key
    assert store_key("source2", "fp32", timing) != key
    assert store_key("source", "fp16", timing) != key
    assert store_key("source", "fp32", replace(timing, cuda_graph=True)) != key
    assert store_key("source", "fp32", replace(timing, measure="gpu")) != key
    assert store_key("source", "fp32", replace(timing, conv_tf32=not timing.conv_tf32)) != key
    # The autotune budget is the candidate's, not the baselines'
    assert store_key("source", "fp32", replace(timing, autotune_budget_s=5.0)) == key
    monkeypatch.setattr(torch, "__version__", torch.__version__ + ".upgraded")
    assert store_key("source", "fp32", timing) != key  # an upgrade times them afresh


def test_a_gpu_models_store_on_disk_outlives_its_process_and_a_memory_one_writes_nothing(
        tmp_path):
    store = BaselineStore.for_gpu(tmp_path, "NVIDIA H200")
    assert store.get("k") is None
    put = store.put("k", STORED, ("eager: a note",))
    again = BaselineStore.for_gpu(tmp_path, "NVIDIA H200")
    assert again.path.name == "nvidia-h200.json"
    assert again.get("k") == put and put.measures == STORED and put.notes == ("eager: a note",)
    assert put.names == ["eager", "compile"]  # the first timed is the probe
    assert BaselineStore.for_gpu(tmp_path, "NVIDIA A100").get("k") is None
    again.discard("k")
    assert BaselineStore.for_gpu(tmp_path, "NVIDIA H200").get("k") is None
    memory = BaselineStore()
    memory.put("k", STORED)
    assert memory.get("k").measures == STORED
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["baselines", "nvidia-h200.json"]


def test_a_fresh_store_times_every_task_again_but_keeps_other_tasks_entries(tmp_path):
    BaselineStore.for_gpu(tmp_path, "GPU").put("a", STORED)
    BaselineStore.for_gpu(tmp_path, "GPU").put("b", STORED)
    fresh = BaselineStore.for_gpu(tmp_path, "GPU", fresh=True)
    assert fresh.get("a") is None and fresh.get("b") is None
    retimed = {"gpu": {"eager": stats(3.0)}}
    fresh.put("a", retimed)
    assert fresh.get("a").measures == retimed
    later = BaselineStore.for_gpu(tmp_path, "GPU")
    assert later.get("a").measures == retimed and later.get("b").measures == STORED


def test_entries_of_the_older_format_are_never_read(tmp_path):
    """Before, entries were read off a candidate's verdict (times taken in its process)."""
    path = tmp_path / "baselines" / "gpu.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"gpu": "GPU", "tasks": {"k": {"stats": {"eager": stats(1.0)},
                                                              "measured_at": "then"}}}))
    assert BaselineStore.for_gpu(tmp_path, "GPU").get("k") is None


def test_the_probe_is_steady_within_the_drift_bound_on_every_measure_it_checks():
    near = {"gpu": {"eager": stats(2.0 * 1.05)}, "call": {"eager": stats(2.2 * 0.96)}}
    ratios = drift(near, STORED, "eager")
    assert ratios == pytest.approx({"gpu": 1.05, "call": 0.96})
    assert steady(ratios)
    off = {"gpu": {"eager": stats(2.0)}, "call": {"eager": stats(2.2 * (1 + DRIFT + 0.02))}}
    assert not steady(drift(off, STORED, "eager"))  # one measure off is drift
    slower = {"gpu": {"eager": stats(2.0 / (1 + DRIFT + 0.05))}, "call": {"eager": stats(2.2)}}
    assert not steady(drift(slower, STORED, "eager"))  # faster counts too
    assert not steady(drift({"gpu": {"compile": stats(1.5)}}, STORED, "eager"))  # nothing probed


def test_the_verdict_gets_the_stored_baselines_and_the_candidates_measured_times():
    measured = {"gpu": {"eager": stats(2.1), "candidate_0": stats(0.5)},
                "call": {"eager": stats(2.3), "candidate_0": stats(0.6)}}
    merged = with_stored(measured, STORED)
    assert merged == {"gpu": {"eager": stats(2.0), "compile": stats(1.5),
                              "candidate_0": stats(0.5)},
                      "call": {"eager": stats(2.2), "compile": stats(1.6),
                               "candidate_0": stats(0.6)}}
