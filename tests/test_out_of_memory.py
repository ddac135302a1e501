"""A candidate that runs out of memory gets `out_of_memory` with the size it asked for, wherever it ran out."""

from kernelevo.candidate import Candidate, load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.analysis.oom import in_units, requested_size
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.evaluate.parent.outcome import WARM_UP, _crash_verdict, _decided
from kernelevo.evaluate.sandbox.pipe import JobResult
from kernelevo.task import load_task
from tests.conftest import ROOT

CUDA_OOM = ("CUDA out of memory. Tried to allocate 6.40 GiB. GPU 0 has a total capacity of "
            "139.81 GiB of which 2.10 GiB is free.")

RAISES_IN_INIT = f"""
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        raise torch.OutOfMemoryError({CUDA_OOM!r})
    def forward(self, x, y):
        return x + y
"""

RAISES_IN_FORWARD = f"""
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x, y):
        raise torch.OutOfMemoryError({CUDA_OOM!r})
"""

# Its forward returns at once (an expanded view takes no memory); the harness's
# copy of that output asks the host for 4 TiB, outside the forward's guard.
OUTPUT_TOO_LARGE_TO_COPY = """
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x, y):
        return torch.zeros(1, dtype=x.dtype).expand(1 << 40)
"""


def test_running_out_of_memory_anywhere_is_a_reported_verdict_with_the_size():
    task = load_task(str(ROOT / "tests/fixtures/tasks/add.py"))
    judge = Judge(task, EvalConfig(static_checks=False, vary_shapes=False))
    candidates = [Candidate(source, "triton") for source in
                  (RAISES_IN_INIT, RAISES_IN_FORWARD, OUTPUT_TOO_LARGE_TO_COPY)]
    honest = load_candidate(ROOT / "tests/fixtures/candidates/honest_add.py")
    try:
        verdicts = judge.evaluate_many([*candidates, honest])
    finally:
        judge.close()
    init, forward, copied, after = verdicts
    for verdict in (init, forward, copied):
        assert (verdict.status, verdict.reason) == ("runtime_error", "out_of_memory"), \
            f"{verdict.reason}: {verdict.message[:600]}"
    assert init.message.startswith("out of memory during ModelNew's construction: it tried "
                                   "to allocate 6.40 GiB"), init.message[:300]
    assert forward.message.startswith("out of memory during forward: it tried to allocate "
                                      "6.40 GiB"), forward.message[:300]
    assert copied.message.startswith("out of memory during loading and the first input sets: "
                                     "it tried to allocate 4.00 TiB"), copied.message[:300]
    # The worker went on: the next candidate was judged as usual.
    assert after.reason == "passed", after.message[:600]


def test_a_process_that_died_of_memory_without_reporting_says_so():
    log = f"Traceback (most recent call last):\n  ...\ntorch.OutOfMemoryError: {CUDA_OOM}\n"
    verdict = _crash_verdict(JobResult(exit_code=1, log_tail=log), "loading or checking")
    assert (verdict.reason, verdict.status) == ("out_of_memory", "runtime_error")
    assert verdict.message == ("out of memory during loading or checking: it tried to allocate "
                               "6.40 GiB (the process exited with code 1 without reporting)")
    plain = _crash_verdict(JobResult(exit_code=1, log_tail="ValueError: no\n"), "timing")
    assert plain.reason == "exited_early"


def test_a_worker_that_died_in_its_warm_up_says_no_candidate_had_loaded():
    """The worker runs the task's Model for the baselines before any candidate loads:
    memory that ran out there is not the candidate's doing, and the verdict says where."""
    import types

    log = f"Traceback (most recent call last):\n  ...\ntorch.OutOfMemoryError: {CUDA_OOM}\n"
    died = JobResult(exit_code=1, log_tail=log)
    state = types.SimpleNamespace(decisions={}, warmed_up=False)
    verdict = _decided(state, died, None, 0, None)
    assert verdict.reason == "out_of_memory"
    assert verdict.message == (f"out of memory during {WARM_UP}: it tried to allocate 6.40 GiB "
                               "(the process exited with code 1 without reporting)")
    assert WARM_UP.startswith("the worker's warm-up (the task's Model")
    state.warmed_up = True  # past its warm-up: a candidate was loading
    assert "during loading or checking" in _decided(state, died, None, 0, None).message


def test_the_size_is_read_from_gpu_and_host_messages():
    assert requested_size(CUDA_OOM) == "6.40 GiB"
    host = ("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 6871947673600 bytes. Error code 12")
    assert requested_size(host) == "6.25 TiB"
    assert requested_size("RuntimeError: out of memory") is None
    assert (in_units(512), in_units(1536), in_units(3 << 30)) == ("512 bytes", "1.50 KiB",
                                                                  "3.00 GiB")


def test_a_process_that_ended_without_reporting_says_what_it_said_last():
    heard = [{"kind": "isolation"}, {"kind": "progress", "phase": "timing"},
             {"kind": "timed"}, {"kind": "progress", "phase": "profiling"}]
    verdict = _crash_verdict(JobResult(exit_code=0, messages=heard), "timing")
    assert verdict.reason == "exited_early"
    assert verdict.message == ("the process exited with code 0 during timing without "
                               "reporting (its last message: 'timed', last step: 'profiling')")
    silent = _crash_verdict(JobResult(exit_code=0), "loading or checking")
    assert silent.message == ("the process exited with code 0 during loading or checking "
                              "without reporting")
    killed = _crash_verdict(JobResult(exit_code=-11, messages=heard[:1]), "timing")
    assert killed.message == ("the process died from SIGSEGV during timing (its last "
                              "message: 'isolation')")
