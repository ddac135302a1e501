"""An extracted task is judged like any task: its own reference passes as a baseline and a
hand-written Triton kernel passes under the interpreter."""

from kernelevo.candidate import Candidate, detect_backend, load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.judge import Judge
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
