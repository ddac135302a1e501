"""An extracted task is judged like any task: its own reference passes as a baseline and the
hand-written Triton kernels (the layernorm, the whole attention) pass under the interpreter."""

import shutil
import tempfile
from pathlib import Path

import pytest

from kernelevo.candidate import Candidate, detect_backend, load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.model.extract import extract, select_hot
from kernelevo.model.profile import profile_model
from kernelevo.task import load_task
from tests.conftest import ROOT

TASKS = ROOT / "examples/model_block/tasks"


def test_the_shipped_layernorm_task_judges_its_reference_and_its_kernel():
    task = load_task(str(TASKS / "ln1.py"))
    source = task.source.replace("class Model(", "class ModelNew(")
    baseline = Candidate(source, detect_backend(source))  # as `kernelevo eval` takes a file
    kernel = load_candidate(ROOT / "examples/model_block/kernels/ln1.py")
    judge = Judge(task, EvalConfig(device="cpu"))
    try:
        reference, written = judge.evaluate_many([baseline, kernel])
    finally:
        judge.close()
    assert (reference.status, reference.reason) == ("ok", "pytorch_only"), reference.message
    assert written.passed_kernel, f"{written.reason}: {written.message[:400]}"
    assert any(note.startswith("also correct at") for note in written.notes), written.notes


@pytest.fixture(scope="module")
def attention_task():
    """The block's whole attention, extracted as `optimize --top 2` extracts it."""
    folder = Path(tempfile.mkdtemp(prefix="kernelevo-test-tasks-"))
    folder.chmod(0o755)  # the sandboxed judge (another user) reads it; pytest's tmp_path is private
    profile = profile_model(str(ROOT / "examples/model_block/block.py"), device="cpu", repeats=1)
    extract(profile, select_hot(profile, 1, paths=["attn"]), folder)
    yield load_task(str(folder / "attn.py"))
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_the_attention_seed_passes_the_judge_at_other_sizes_too(attention_task, precision):
    kernel = load_candidate(ROOT / "examples/model_block/kernels/attn.py")
    judge = Judge(attention_task, EvalConfig(device="cpu", precision=precision))
    try:
        verdict = judge.evaluate(kernel)
    finally:
        judge.close()
    # Its projections are cuBLAS (F.linear), its core Triton: no reuse of the reference's ops.
    assert verdict.passed_kernel, f"{verdict.reason}: {verdict.message[:400]}"
    assert any(note.startswith("also correct at") for note in verdict.notes), verdict.notes
