"""Warm judging on the CPU: the GPU gate, standby sessions, and the evaluation service."""

import json
import os
import threading
import time
from dataclasses import replace

import pytest

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.errors import ConfigError, EnvironmentProblem
from kernelevo.evaluate.parent.gate import GateAbandoned, GpuGate, Hold, gate_for
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.evaluate.protocol import JudgeJob, JudgeLike
from kernelevo.evaluate.remote.client import ServiceJudge, find_service, request
from kernelevo.evaluate.remote.service import Service, ServiceSettings
from kernelevo.evaluate.sandbox import jobs as sandbox
from kernelevo.task import load_task
from tests.conftest import ROOT

SOFTMAX = ROOT / "examples" / "softmax"


def _in_thread(target):
    done = threading.Event()

    def run():
        target()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


def test_timing_waits_for_shared_holders_and_excludes_new_ones():
    gate = GpuGate()
    gate.acquire_shared()
    timed = _in_thread(lambda: (gate.acquire_exclusive(), gate.release_exclusive()))
    assert not timed.wait(0.3)  # a check still runs: timing waits
    # A waiting timing phase goes first: a new check does not slip in before it.
    late = _in_thread(lambda: (gate.acquire_shared(), gate.release_shared()))
    assert not late.wait(0.3)
    gate.release_shared()
    assert timed.wait(2) and late.wait(2)
    assert gate.holders() == (0, False)


def test_a_timing_s_wait_comes_back_with_who_held_the_gpu_and_how_long():
    gate = GpuGate()
    recheck, oracle = Hold(gate, label="7:recheck:worker"), Hold(gate, label="3:task:oracle")
    recheck.shared()
    oracle.shared()
    timing = Hold(gate)
    timed = _in_thread(timing.exclusive)
    time.sleep(0.3)
    oracle.release()
    assert not timed.wait(0.3)  # the re-check's worker still holds it
    recheck.release()
    assert timed.wait(2)
    waited = timing.waited_on
    assert set(waited) == {"7:recheck:worker", "3:task:oracle"}
    assert 0.25 < waited["3:task:oracle"] < waited["7:recheck:worker"]
    assert waited["7:recheck:worker"] >= 0.55
    timing.release()
    assert gate.holders() == (0, False)


def test_a_timing_that_ends_a_verdict_goes_before_a_warm_up_s_baseline_timing():
    """Both wait behind a check; once it ends, the candidate's timing goes first though
    the warm-up (timing a task's baselines for the store) asked first: a suite's first
    verdicts do not wait for every lane's warm-up."""
    gate, order = GpuGate(), []
    gate.acquire_shared()

    def timing(name, urgent):
        gate.acquire_exclusive(urgent=urgent)
        order.append(name)
        time.sleep(0.05)
        gate.release_exclusive()

    warm_up = _in_thread(lambda: timing("warm-up's baselines", False))
    time.sleep(0.2)
    candidate = _in_thread(lambda: timing("candidate", True))
    time.sleep(0.2)
    gate.release_shared()
    assert warm_up.wait(2) and candidate.wait(2)
    assert order == ["candidate", "warm-up's baselines"]
    assert _in_thread(lambda: timing("alone", False)).wait(2)  # nothing ahead: at once
    assert gate.holders() == (0, False)


def test_a_session_names_the_holders_its_timing_waited_for_by_their_relation_to_it():
    from types import SimpleNamespace

    from kernelevo.evaluate.parent.session import Session

    waited = Session._waited_on(SimpleNamespace(number=4), {
        "4:task:oracle": 0.2, "5:recheck:worker": 0.5, "5:recheck:oracle": 0.1,
        "6:task:worker": 0.3, "8:task:worker": 0.25, "judge": 0.05})
    assert waited == {"gate_wait_own_oracle": 0.2, "gate_wait_recheck_worker": 0.5,
                      "gate_wait_recheck_oracle": 0.1, "gate_wait_next_worker": 0.55,
                      "gate_wait_judge": 0.05}


def test_the_baselines_warm_up_gives_the_gpu_up_before_torch_compile_is_set_up(
        monkeypatch, tmp_path):
    """Only the baselines' model and inputs are made under the brief hold; torch.compile's
    set-up (imports, its backend) is CPU work and runs after the hold is given up."""
    import torch

    from kernelevo.evaluate.shared import inputs
    from kernelevo.evaluate.shared.messages import WorkerJob
    from kernelevo.evaluate.child.baselines import warm_baselines

    order = []

    class Window:
        def cpu_only(self):
            order.append("cpu_only")

        def kernels(self):
            order.append("kernels")

    def recording_compile(model, **kwargs):
        order.append("torch.compile")
        return model

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    monkeypatch.setattr(torch, "compile", recording_compile)
    source = (SOFTMAX / "task.py").read_text()
    task = inputs.import_source(source, "kernelevo_task", tmp_path, str(SOFTMAX))
    config = EvalConfig()
    job = WorkerJob(task_source=source, device="cpu", dtype="float32", scratch=str(tmp_path),
                    time=True, timing=config.timing)
    baselines = warm_baselines(task, job, Window())
    assert "compile" in baselines.contestants, baselines.notes
    assert order[:2] == ["cpu_only", "torch.compile"] and order[-1] == "kernels"


def test_checks_share_the_gate_and_a_hold_moves_between_modes():
    gate = GpuGate()
    first, second = Hold(gate), Hold(gate)
    first.shared()
    second.shared()
    assert gate.holders() == (2, False)
    first.release()
    second.exclusive()  # drops its shared hold first, so it cannot wait on itself
    assert gate.holders() == (0, True)
    second.release()
    second.release()  # releasing twice is harmless
    assert gate.holders() == (0, False)
    with pytest.raises(RuntimeError):
        gate.release_exclusive()


def test_each_gpu_has_its_own_gate():
    assert gate_for("cuda", 0) is gate_for("cuda", None)
    assert gate_for("cuda", 1) is not gate_for("cuda", 0)


def _softmax():
    return load_task(str(SOFTMAX / "task.py")), load_candidate(SOFTMAX / "triton_candidate.py")


def test_a_standby_session_judges_the_next_candidate_alike_and_holds_no_gate_while_idle():
    task, candidate = _softmax()
    judge = Judge(task, EvalConfig(), standby=True)
    assert isinstance(judge, JudgeLike)
    try:
        first = judge.evaluate(candidate)
        gate = gate_for(judge.device, judge.gpu_index)
        # The standby worker warms up, then waits for candidates without
        # holding the gate: a timing phase elsewhere could take it.
        waiting = judge._standby
        assert waiting is not None and waiting.warm.wait(120) and waiting.oracle.done.wait(120)
        assert gate.holders() == (0, False) and waiting.alive()
        second = judge.evaluate(candidate)
        assert judge._standby is not waiting  # used, and a new one started
    finally:
        judge.close()
    assert first.reason == second.reason == "passed"
    # The second worker was up before its candidate came, its reference drawn.
    assert second.phases_s["worker_start"] < 0.5
    assert second.phases_s["reference_wait"] < 0.5
    # and the evaluation's path says so: it waited on its checks, not on a warm-up
    for verdict in (first, second):
        path = {k: v for k, v in verdict.phases_s.items() if k.startswith("path_")}
        assert {"path_warmup_left", "path_checks", "path_to_exit"} <= set(path), path
        assert sum(path.values()) <= verdict.phases_s["total"]
    assert second.phases_s["path_warmup_left"] < 0.5
    assert first.phases_s["path_warmup_left"] > second.phases_s["path_warmup_left"]
    assert first.errors is not None and second.errors is not None


@pytest.mark.parametrize("after", ["checked", "warm"])
def test_a_first_evaluation_starts_its_standby_before_it_ends(monkeypatch, after):
    """Once warm or checked: the next candidate's worker warms up while this one runs."""
    task, candidate = _softmax()
    monkeypatch.setattr(Judge, "standby_after", after)
    judge = Judge(task, EvalConfig(), standby=True)
    calls = []
    start = judge._start_standby

    def recorded(**kwargs):
        calls.append((threading.current_thread().name, judge._standby is None))
        start(**kwargs)

    monkeypatch.setattr(judge, "_start_standby", recorded)
    try:
        verdict = judge.evaluate(candidate)
        assert verdict.reason == "passed"
        # The first call came from the evaluation's own worker thread, on the
        # worker's "checked" (or "ready") message, and it started the standby then.
        assert calls[0] == ("kernelevo-worker", True)
        assert all(empty is False for _, empty in calls[1:])  # none started twice
        assert judge._standby is not None and judge._standby.warm.wait(120)
    finally:
        judge.close()


def test_the_worker_goes_on_while_the_oracle_exits_and_the_judge_checks_trivial_answers(
        monkeypatch):
    """The reference is handed on as the oracle's last message comes, not after both."""
    from kernelevo.evaluate.parent import oracle_run

    task, candidate = _softmax()
    worker_went_on = threading.Event()
    seen = {}

    def slow_check(reference, device):  # holds the oracle's thread until the worker goes on
        seen["worker_first"] = worker_went_on.wait(30)
        return replace(reference, trivial=())

    monkeypatch.setattr(oracle_run, "_check_trivial_answers", slow_check)
    judge = Judge(task, EvalConfig(), progress=lambda phase: (
        worker_went_on.set() if phase == "loading candidate" else None))
    verdict = judge.evaluate(candidate)
    assert seen == {"worker_first": True}
    assert verdict.reason == "passed", verdict.message
    assert {"trivial_check", "oracle_exit"} <= set(verdict.phases_s)


def test_a_standby_runs_no_kernels_until_the_evaluation_beside_it_has_timed():
    """Else its warm-up holds the GPU when that evaluation is ready to time (gate_wait).

    Its worker's brief kernels (the baselines' model and inputs, nothing at
    all on the CPU) go at once; the oracle's reference waits.
    """
    from types import SimpleNamespace

    from kernelevo.evaluate.parent.session import Session

    task, candidate = _softmax()
    judge = Judge(task, EvalConfig())
    task = judge.task  # shrunk for the CPU, as the judge's own sessions have it
    gate = gate_for(judge.device, judge.gpu_index)
    beside = SimpleNamespace(past_timing=threading.Event())
    standby = Session(judge, task, True, yield_to=beside)
    try:
        # Its children start and import the task, then the oracle waits before its kernels.
        assert standby._yield.waiting.wait(120)
        assert standby.warm.wait(120)  # the worker is warm: it asked for brief kernels only
        time.sleep(0.5)
        assert not standby.oracle.ready.is_set()
        assert gate.holders() == (0, False)
        beside.past_timing.set()  # the evaluation beside it has timed its candidates
        assert standby.oracle.ready.wait(120)
        (verdict,) = standby.run([candidate])
    finally:
        standby.close()
    assert verdict.reason == "passed", verdict.message
    # A job that takes a standby still waiting ends the wait: its worker warms up now.
    waiting = Session(judge, task, True, yield_to=SimpleNamespace(past_timing=threading.Event()))
    try:
        assert waiting._yield.waiting.wait(120)
        (verdict,) = waiting.run([candidate])
    finally:
        waiting.close()
    assert verdict.reason == "passed", verdict.message


def test_a_warm_up_compiles_without_the_gpu_and_a_candidate_cannot_drop_the_hold():
    """The session's answers to a worker: a standby's warm-up kernels wait for the
    evaluation beside it, brief ones do not; `CpuWork` gives the hold up before
    the worker's `Ready` (the harness's torch.compile), never after it (a
    candidate's code runs then)."""
    from types import SimpleNamespace

    from kernelevo.evaluate.shared.messages import CpuWork, Gpu, Ready
    from kernelevo.evaluate.parent.session import Session

    task, _ = _softmax()
    judge = Judge(task, EvalConfig())
    gate = gate_for(judge.device, judge.gpu_index)
    beside = SimpleNamespace(past_timing=threading.Event())
    session = Session(judge, judge.task, True, yield_to=beside)
    try:
        session.kill()  # its own processes play no part: the answers are called here
        for thread in session._threads:  # gone, with their own releases of the hold
            thread.join(60)
        session._ready_heard = False  # its worker may have reached Ready before it died
        session.killed.clear()  # a killed session takes no hold: the answers are tested alive
        assert session._answer(Gpu(brief=True)) is not None
        assert session.hold.state == "shared" and gate.holders() == (1, False)
        session._answer(CpuWork())  # the compile: no hold
        assert session.hold.state == "none" and gate.holders() == (0, False)
        session.killed.clear()  # waits give up on a killed session: this one must wait
        asked = _in_thread(lambda: session._answer(Gpu()))
        assert not asked.wait(0.5)  # the compiled graphs' first run waits for the timing beside
        beside.past_timing.set()
        assert asked.wait(10) and session.hold.state == "shared"
        assert session._yielded_s is not None and session._yielded_s >= 0.4
        session.kill()  # so Ready is answered with Abort at once, not after a wait for work
        session._answer(Ready())
        with pytest.raises(GateAbandoned):
            session.hold.shared()  # killed: no new hold, even with the GPU free
        session.killed.clear()
        session.hold.shared()  # as a worker given candidates holds it
        session._answer(CpuWork())  # from a candidate's code: ignored
        assert session.hold.state == "shared" and gate.holders() == (1, False)
    finally:
        session.hold.release()
        session.kill()
        session.close()
    assert gate.holders() == (0, False)


def test_children_take_the_gate_only_once_their_task_is_imported(tmp_path, monkeypatch):
    """Process start and the task's import run no kernels: a timing phase elsewhere goes on."""
    # The task tells the test it was imported by writing a file beside it,
    # which a confined child may not: this test is about the gate.
    monkeypatch.setenv("KERNELEVO_CONFINE", "0")
    slow, imported = tmp_path / "task.py", tmp_path / "imported"
    slow.write_text(f"import pathlib, time\npathlib.Path({str(imported)!r}).touch()\n"
                    "time.sleep(2)\n" + (SOFTMAX / "task.py").read_text())
    judge = Judge(load_task(str(slow)), EvalConfig())
    gate = gate_for(judge.device, judge.gpu_index)
    gate.acquire_exclusive()  # as if another candidate were being timed
    verdicts = []
    judging = _in_thread(lambda: verdicts.append(
        judge.evaluate(load_candidate(SOFTMAX / "triton_candidate.py"))))
    try:
        # The children start and import the task while the timing phase holds
        # the GPU; then they ask for a shared hold and wait for it.
        deadline = time.monotonic() + 120
        while not imported.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert imported.exists()
        assert not judging.wait(3)
        assert gate.holders() == (0, True)
    finally:
        gate.release_exclusive()
    seen = 0
    while not judging.wait(0.05):
        seen = max(seen, gate.holders()[0])
    assert verdicts and verdicts[0].reason == "passed", verdicts
    assert seen >= 1  # the children did hold it while they ran kernels
    assert gate.holders() == (0, False)
    assert verdicts[0].phases_s["warmup_task_import"] >= 2


def test_closing_a_judge_ends_its_standby_processes():
    task, candidate = _softmax()
    judge = Judge(task, EvalConfig(), standby=True)
    judge.evaluate(candidate)
    assert judge._standby is not None
    judge.close()
    assert judge._standby is None
    with sandbox._live_lock:
        assert not sandbox._live_jobs


def test_a_job_crosses_as_plain_json_and_bad_jobs_are_named():
    task, candidate = _softmax()
    job = JudgeJob.of(task, [candidate], EvalConfig(input_sets=4), timed=False)
    again = JudgeJob.from_dict(json.loads(json.dumps(job.to_dict())))
    assert again == job and again.config().input_sets == 4
    assert again.candidate_list()[0].source == candidate.source
    data = job.to_dict()
    for change, named in (({"version": 99}, "version"), ({"candidates": []}, "candidates"),
                          ({"extra": 1}, "extra"), ({"gpu": -1}, "gpu"),
                          ({"task_source": 3}, "task_source")):
        with pytest.raises(ConfigError, match=named):
            JudgeJob.from_dict({**data, **change})
    with pytest.raises(ConfigError, match="no_such_setting"):
        JudgeJob.from_dict({**data, "eval": {"no_such_setting": 1}}).config()


@pytest.fixture
def service(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELEVO_SERVICE_URL", raising=False)
    monkeypatch.delenv("KERNELEVO_SERVICE_TOKEN", raising=False)
    running = Service(ServiceSettings(), tmp_path)
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    yield running
    running.stop()
    thread.join(10)


def test_the_service_judges_jobs_with_warm_judges_and_checks_the_token(service, tmp_path):
    record = json.loads((tmp_path / "service.json").read_text())
    assert os.stat(tmp_path / "service.json").st_mode & 0o777 == 0o600
    found = find_service(tmp_path)
    assert found is not None and found.url == record["url"] and found.device == "cpu"
    task, candidate = _softmax()
    judge = ServiceJudge(found, task, EvalConfig())
    first, second = judge.evaluate(candidate), judge.evaluate(candidate)
    assert first.reason == second.reason == "passed"
    assert second.phases_s["worker_start"] < 0.5  # the service's judge stayed warm
    health = request(found.url, found.token, "GET", "/v1/health")
    assert health["jobs_done"] == 2 and health["warm_judges"] == 1
    with pytest.raises(EnvironmentProblem, match="401"):
        request(found.url, "wrong-token", "GET", "/v1/health")
    bad = {**JudgeJob.of(task, [candidate], EvalConfig()).to_dict(), "version": 0}
    with pytest.raises(EnvironmentProblem, match="400.*version"):
        request(found.url, found.token, "POST", "/v1/judge", bad)


def test_a_stale_record_is_no_service_and_a_stopped_service_removes_its_record(tmp_path):
    (tmp_path / "service.json").write_text(json.dumps({"url": "http://127.0.0.1:9",
                                                        "token": "x"}))
    assert find_service(tmp_path) is None
    running = Service(ServiceSettings(), tmp_path / "own")
    running.stop()
    assert not (tmp_path / "own" / "service.json").exists()


def test_serving_beyond_loopback_needs_a_long_token():
    with pytest.raises(ConfigError, match="token"):
        ServiceSettings(host="0.0.0.0", token="short")
    assert ServiceSettings(host="0.0.0.0", token="x" * 16).token == "x" * 16
    assert len(ServiceSettings().token) >= 32  # loopback: a random one
