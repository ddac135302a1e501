"""The bundled examples: every honest Triton candidate is accepted (interpreter on CPU);
CUDA candidates are compile-checked or skipped with a reason, never failed, without a GPU."""

import pytest
import torch

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.judge import Judge
from kernelevo.task import load_task
from tests.conftest import ROOT

EXAMPLES = sorted(p.name for p in (ROOT / "examples").iterdir() if (p / "task.py").exists())


def test_there_are_six_examples_with_both_backends():
    assert len(EXAMPLES) >= 6
    for name in EXAMPLES:
        assert (ROOT / "examples" / name / "triton_candidate.py").exists()
    assert sum((ROOT / "examples" / n / "cuda_candidate.py").exists() for n in EXAMPLES) >= 4


@pytest.mark.parametrize("name", EXAMPLES)
def test_triton_example_is_accepted(name):
    folder = ROOT / "examples" / name
    judge = Judge(load_task(str(folder / "task.py")), EvalConfig(policy="strict"))
    verdict = judge.evaluate(load_candidate(folder / "triton_candidate.py"))
    assert verdict.status == "ok", f"{verdict.reason}: {verdict.message}\n{verdict.logs[-2000:]}"
    assert verdict.errors.rel_l2_error < 1e-5


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
@pytest.mark.parametrize("name", EXAMPLES)
def test_cuda_example_without_gpu_is_skipped_with_a_reason(name):
    folder = ROOT / "examples" / name
    if not (folder / "cuda_candidate.py").exists():
        pytest.skip("no CUDA candidate")
    judge = Judge(load_task(str(folder / "task.py")), EvalConfig())
    verdict = judge.evaluate(load_candidate(folder / "cuda_candidate.py"))
    assert verdict.status == "skipped", f"{verdict.reason}: {verdict.message[:2000]}"
    assert verdict.reason in ("no_gpu", "no_nvcc", "compile_check_unavailable")
    assert verdict.timings == {}
