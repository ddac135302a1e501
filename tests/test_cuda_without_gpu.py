"""A CUDA candidate on a machine without a GPU: a compile-only check in its own limit, its verdict at once.

nvcc stands in as a small script, so each test takes seconds: the check's
path through the judge is what is tested (the real nvcc check of a torch
extension is in test_examples.py and takes minutes of CPU here).
"""

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import torch

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.task import load_task
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine with no GPU")

GELU = ROOT / "examples" / "gelu"


@pytest.fixture
def tools():
    """A folder for stand-in tools that the sandboxed check (another user) can read."""
    folder = Path(tempfile.mkdtemp(prefix="kernelevo-test-tools-"))
    folder.chmod(0o755)  # pytest's own tmp_path is private to its user
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _fake_nvcc(folder, monkeypatch, script: str) -> None:
    nvcc = folder / "nvcc"
    nvcc.write_text("#!/bin/sh\n" + script)
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def _judged(config: EvalConfig):
    judge = Judge(load_task(str(GELU / "task.py")), config)
    try:
        return judge.evaluate(load_candidate(GELU / "cuda_candidate.py"))
    finally:
        judge.close()


def _no_interpreter_note(verdict) -> None:
    assert not any("Triton interpreter" in note for note in verdict.notes), verdict.notes


def test_a_clean_compile_is_no_gpu_and_says_what_was_checked_within_which_limit(
        tools, monkeypatch):
    _fake_nvcc(tools, monkeypatch, "exit 0\n")
    verdict = _judged(EvalConfig(build_timeout_s=120))
    assert (verdict.status, verdict.reason) == ("skipped", "no_gpu"), verdict.message[:1000]
    assert verdict.message.startswith("CUDA source compiled with nvcc; running it needs a GPU "
                                      "(a compile-only check: ")
    assert "of its own limit of 120 s, build_timeout_s)" in verdict.message
    # No oracle or worker was started for it: nothing here could run it.
    assert "compile_check" in verdict.phases_s and "worker_start" not in verdict.phases_s
    assert verdict.isolation.startswith("compile-only check in its own process, no GPU")
    _no_interpreter_note(verdict)


def test_a_compile_error_is_compile_failed_with_nvccs_message(tools, monkeypatch):
    _fake_nvcc(tools, monkeypatch,
               'echo \'candidate.cu(7): error: identifier "undefined_thing" is undefined\' >&2\n'
               "exit 1\n")
    verdict = _judged(EvalConfig())
    assert (verdict.status, verdict.reason) == ("compile_error", "compile_failed")
    assert 'identifier "undefined_thing" is undefined' in verdict.message
    _no_interpreter_note(verdict)


def test_a_check_past_its_own_limit_is_skipped_at_that_limit_not_the_jobs(tools, monkeypatch):
    _fake_nvcc(tools, monkeypatch, "sleep 120\n")
    started = time.monotonic()
    verdict = _judged(EvalConfig(build_timeout_s=3, timeout_s=300))
    assert time.monotonic() - started < 60
    assert (verdict.status, verdict.reason) == ("skipped", "no_gpu")
    assert verdict.message == ("no GPU, and the nvcc compile check did not finish within its "
                               "own limit of 3 s (build_timeout_s): the CUDA source was not "
                               "checked")
    _no_interpreter_note(verdict)


def test_without_nvcc_the_candidate_is_skipped_with_the_reason(tools, monkeypatch):
    monkeypatch.setenv("PATH", str(tools))  # nothing on it: no nvcc
    verdict = _judged(EvalConfig())
    assert (verdict.status, verdict.reason) == ("skipped", "no_nvcc"), verdict.message[:1000]
    assert verdict.message == "no GPU and no nvcc: the CUDA candidate was not checked"
    _no_interpreter_note(verdict)


BUILDS_IN_INIT = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline("lazy_gelu", "torch::Tensor f(torch::Tensor x);",
                               cuda_sources="__global__ void k(float* x) { x[0] = 1.0f; }\\n"
                                            "torch::Tensor f(torch::Tensor x) { return x; }",
                               functions=["f"])

    def forward(self, x):
        return self.ext.f(x)
'''


def test_a_build_in_modelnew_is_the_same_compile_check_in_the_worker(tools, monkeypatch):
    from kernelevo.candidate import Candidate

    _fake_nvcc(tools, monkeypatch, "exit 0\n")
    judge = Judge(load_task(str(GELU / "task.py")), EvalConfig(static_checks=False))
    try:
        verdict = judge.evaluate(Candidate(BUILDS_IN_INIT, "cuda"))
    finally:
        judge.close()
    # Its import built nothing, so the worker met it, and its construction was the check.
    assert (verdict.status, verdict.reason) == ("skipped", "no_gpu"), verdict.message[:1000]
    assert verdict.message == "CUDA source compiled with nvcc; running it needs a GPU"
    assert "worker_start" in verdict.phases_s
    assert any(note.startswith("no GPU: checked on the CPU with sizes") for note in verdict.notes)
    _no_interpreter_note(verdict)
