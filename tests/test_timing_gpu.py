"""The three timing measures on a real GPU (run with -m gpu on the GPU machine)."""

import pytest

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.evaluate.judge import Judge
from kernelevo.task import load_task
from tests.conftest import ROOT

pytestmark = pytest.mark.gpu

GELU = ROOT / "examples" / "gelu"


def _verdict(measure: str, sizes: dict):
    task = load_task(str(GELU / "task.py")).with_constants(sizes)
    config = EvalConfig(timing=TimingConfig(baselines=("eager",), measure=measure))
    return Judge(task, config).evaluate(load_candidate(GELU / "triton_candidate.py"))


def test_a_launch_bound_kernel_gets_gpu_and_call_time_and_names_the_one_used():
    verdict = _verdict("gpu", {"batch_size": 16, "dim": 1024})
    assert verdict.reason == "passed", verdict.message
    assert verdict.timing_measure == "gpu" and set(verdict.measures) == {"gpu", "call"}
    gpu, call = verdict.measures["gpu"]["candidate"], verdict.measures["call"]["candidate"]
    # A few microseconds of device work; a Python call costs more than that.
    assert gpu.median_ms < 0.02 and call.median_ms > gpu.median_ms
    assert verdict.timings["candidate"] == gpu
    assert verdict.speedup_vs_eager == pytest.approx(
        verdict.measures["gpu"]["eager"].median_ms / gpu.median_ms)
    assert any(note.startswith("speedups use GPU time") for note in verdict.notes)


def test_call_time_can_drive_the_speedup():
    verdict = _verdict("call", {"batch_size": 16, "dim": 1024})
    assert verdict.reason == "passed" and verdict.timing_measure == "call"
    call = verdict.measures["call"]
    assert verdict.speedup_vs_eager == pytest.approx(call["eager"].median_ms
                                                     / call["candidate"].median_ms)


def test_kernelbench_mode_reports_means_like_its_harness():
    verdict = _verdict("kernelbench", {"batch_size": 512, "dim": 4096})
    assert verdict.reason == "passed" and verdict.timing_measure == "kernelbench"
    kernelbench = verdict.measures["kernelbench"]
    assert kernelbench["candidate"].samples == 100
    assert verdict.speedup_vs_eager == pytest.approx(kernelbench["eager"].mean_ms
                                                     / kernelbench["candidate"].mean_ms)


def test_large_kernels_agree_across_gpu_and_call_time():
    verdict = _verdict("gpu", {})
    gpu, call = verdict.measures["gpu"]["candidate"], verdict.measures["call"]["candidate"]
    # At 8192 x 8192 the launch is hidden behind the work: both measure the kernel.
    assert call.median_ms == pytest.approx(gpu.median_ms, rel=0.1)
