"""The bundled examples: every honest Triton candidate is accepted (interpreter on CPU);
CUDA candidates are compile-checked or skipped with a reason, never failed, without a GPU."""

import os
import shutil
from pathlib import Path

import pytest
import torch

from kernelevo.candidate import Candidate, load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.judge import Judge
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
def test_cuda_example_without_gpu_is_skipped_with_a_reason(name, monkeypatch):
    folder = ROOT / "examples" / name
    if not (folder / "cuda_candidate.py").exists():
        pytest.skip("no CUDA candidate")
    if name != "softmax":
        # An nvcc check of a torch extension takes minutes of CPU here: one
        # example is compiled, the others take the path without nvcc.
        monkeypatch.setenv("PATH", _path_without("nvcc"))
    # The nvcc check runs inside the worker's limit: minutes of CPU on a busy machine.
    judge = Judge(load_task(str(folder / "task.py")), EvalConfig(timeout_s=900))
    verdict = judge.evaluate(load_candidate(folder / "cuda_candidate.py"))
    assert verdict.status == "skipped", f"{verdict.reason}: {verdict.message[:2000]}"
    expected = "no_gpu" if name == "softmax" and shutil.which("nvcc") else "no_nvcc"
    assert verdict.reason == expected, verdict.message[:2000]
    assert verdict.timings == {}


@pytest.mark.skipif(torch.cuda.is_available() or shutil.which("nvcc") is None,
                    reason="checks nvcc's compile check without a GPU")
def test_cuda_compile_error_without_gpu_is_a_compile_error_with_nvccs_message():
    folder = ROOT / "examples" / "gelu"
    source = (folder / "cuda_candidate.py").read_text()
    assert "const float v" in source
    broken = source.replace("const float v", "cnst float v")
    judge = Judge(load_task(str(folder / "task.py")), EvalConfig())
    verdict = judge.evaluate(Candidate(source=broken, backend="cuda", name="broken"))
    assert (verdict.status, verdict.reason) == ("compile_error", "compile_failed")
    assert 'identifier "cnst" is undefined' in verdict.message + verdict.logs


def _path_without(program: str) -> str:
    folders = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(f for f in folders if not (Path(f) / program).exists())
