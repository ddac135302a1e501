"""A worker's start in its steps: the forkserver's imports, the fork, the sandbox, then its own."""

from __future__ import annotations

from pathlib import Path

from kernelevo.evaluate.parent.session import start_steps
from kernelevo.evaluate.shared.messages import WORKER_KINDS, Isolation, decode
from kernelevo.suite.time_spent import START_STEPS, LaneRecord, start_line, time_lines, time_spent

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_a_child_forked_before_the_forkserver_was_ready_waited_for_its_imports():
    message = Isolation(started_at=105.5, preloaded_at=105.0, setup_s=0.25)
    assert start_steps(message, asked_at=102.0) == {
        "warmup_forkserver_wait": 3.0, "warmup_process_start": 0.5, "warmup_sandbox": 0.25}
    # the forkserver ready long before: no wait, the fork counted from the ask
    ready = Isolation(started_at=102.125, preloaded_at=50.0, setup_s=0.0625)
    assert start_steps(ready, asked_at=102.0) == {
        "warmup_forkserver_wait": 0.0, "warmup_process_start": 0.125, "warmup_sandbox": 0.0625}
    # a forkserver that names no time of its imports: the whole start is the process's
    assert start_steps(Isolation(started_at=103.0, setup_s=0.0), 102.0)[
        "warmup_process_start"] == 1.0
    # a sender of no stamps (or no ask recorded): nothing said rather than a wrong figure
    assert start_steps(Isolation(), 102.0) == {}
    assert start_steps(message, 0.0) == {}
    assert start_steps(Isolation(started_at=float("nan"), setup_s=0.1), 102.0) == {}
    assert start_steps(Isolation(started_at=103.0, setup_s=float("inf")), 102.0) == {}


def test_only_the_sandboxs_first_message_says_how_the_start_went():
    """The sandbox speaks before any candidate's code runs; a later isolation message on the
    channel (a candidate's) changes nothing."""
    from kernelevo.evaluate.parent.session import Session

    session = Session.__new__(Session)  # only what an isolation message touches

    session._asked_at, session._start_steps, session._isolation_heard = 100.0, {}, False
    first = Isolation(started_at=101.0, preloaded_at=90.0, setup_s=0.5)
    assert Session._answer(session, first) is None
    forged = Isolation(started_at=5000.0, preloaded_at=4000.0, setup_s=999.0)
    assert Session._answer(session, forged) is None
    assert session._start_steps == start_steps(first, 100.0)


def test_the_stamps_travel_in_the_sandboxs_first_message():
    raw = {"kind": "isolation", "network": "off", "layers": ["its own root"],
           "started_at": 12.5, "preloaded_at": 11.0, "setup_s": 0.03}
    message = decode(raw, WORKER_KINDS)
    assert isinstance(message, Isolation)
    assert (message.started_at, message.preloaded_at, message.setup_s) == (12.5, 11.0, 0.03)
    # an older child's message, without them, still decodes
    assert decode({"kind": "isolation", "network": "off"}, WORKER_KINDS) == Isolation("off")


def test_the_first_rows_worker_start_is_printed_step_by_step():
    phases = {"worker_start": 4.7, "warmup_forkserver_wait": 2.0, "warmup_process_start": 0.25,
              "warmup_sandbox": 0.25, "warmup_cuda_init": 0.5, "compile_baseline": 1.5,
              "warmup_gpu_wait": 0.05, "warmup_compile_gpu_wait": 0.05}
    assert start_line(phases) == (
        "4.7 s: waiting for the forkserver's imports 2.00 s, the process's start 0.25 s, "
        "its sandbox 0.25 s, its CUDA context 0.50 s, torch.compile's compile 1.50 s, "
        "the GPU's gate 0.10 s, the rest 0.10 s")
    rows = [{"task": "level1_1", "sample": 0, "wall_s": 9.0, "phases_s": phases}]
    lines = time_lines(time_spent(rows, _first_row_at(9.0), 9.0))
    assert "  its worker's start: " + start_line(phases) in lines
    # a standby's phase counts from its candidates, its steps from its process's start
    ahead = start_line({**phases, "worker_start": 0.5})
    assert ahead.startswith("0.5 s (warmed up ahead") and ahead.endswith("the GPU's gate 0.10 s")
    # a verdict from before the steps were kept: no line rather than a wrong one
    assert start_line({"worker_start": 4.7, "warmup_cuda_init": 0.5}) == ""
    assert not any("worker's start" in line for line in time_lines(time_spent(
        [{**rows[0], "phases_s": {"worker_start": 4.7}}], _first_row_at(9.0), 9.0)))


def test_a_judged_candidates_worker_start_and_decision_hold_their_steps():
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.parent.judge import Judge
    from kernelevo.candidate import load_candidate
    from kernelevo.task import load_task

    folder = EXAMPLES / "softmax"
    judge = Judge(load_task(str(folder / "task.py")), EvalConfig(device="cpu"))
    try:
        verdict = judge.evaluate(load_candidate(folder / "triton_candidate.py"))
    finally:
        judge.close()
    assert verdict.reason == "passed", verdict.message[:500]
    phases = verdict.phases_s
    for key in ("warmup_forkserver_wait", "warmup_process_start", "warmup_sandbox"):
        assert phases[key] >= 0.0, key
    assert phases["warmup_process_start"] > 0.0  # a fork and a child's start take time
    steps = sum(phases.get(key, 0.0) for keys in START_STEPS.values() for key in keys)
    assert steps <= phases["worker_start"] + 0.05, phases  # steps of that phase, not more
    assert phases["recheck_warmup_process_start"] > 0.0  # the re-check's worker too
    # its wait for the GPU's hold once given its candidates: within its warm-up left
    assert 0.0 <= phases["ready_gate_wait"] <= phases["path_warmup_left"] + 0.01
    # and the judge's decision on the outputs, step by step: its parts within it
    parts = ("decide_outputs", "decide_correctness", "decide_honesty", "decide_trivial")
    assert all(phases[key] >= 0.0 for key in parts), phases
    assert sum(phases[key] for key in parts) <= phases["decide"] + 0.01


def _first_row_at(seconds: float) -> LaneRecord:
    record = LaneRecord()
    record.first_row_at_s = seconds
    return record
