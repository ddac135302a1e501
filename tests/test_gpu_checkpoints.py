"""Oracles and workers give their hold on the GPU up between steps of their checks, so a
waiting timing goes first (evaluate/child/checkpoint.py): a suite's timings waited 4 s a
row, up to 66 s, behind other lanes' checks held whole."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kernelevo.evaluate.child import oracle
from kernelevo.evaluate.parent.gate import GpuGate, Hold
from kernelevo.evaluate.shared.messages import Gpu, OracleJob, Progress

ROOT = Path(__file__).resolve().parents[1]


class _Recording:
    """A child's channel that answers every ask and keeps what was said, in order."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def ask(self, message):
        self.said.append("gpu" if isinstance(message, Gpu) else message.kind)
        return {}

    def send(self, message):
        if isinstance(message, Progress):
            self.said.append(message.phase)


def _timing_waits(gate: GpuGate, label: str = "2:task:worker",
                  held_s: float = 0.0) -> tuple[threading.Thread, threading.Event]:
    """A timing phase asking for the GPU alone in a thread of its own: (the thread, set once
    it has the GPU); it holds it `held_s`, then lets go."""
    timing = Hold(gate, label=label)
    took = threading.Event()

    def time_it() -> None:
        timing.exclusive()
        took.set()
        time.sleep(held_s)
        timing.release()

    waiting = threading.Thread(target=time_it, daemon=True)
    waiting.start()
    return waiting, took


def test_the_oracle_lets_a_timing_go_first_between_its_sets_and_steps(tmp_path):
    task = ROOT / "tests/fixtures/tasks/add.py"
    job = OracleJob(task_source=task.read_text(), device="cpu", dtype="float32",
                    scratch=str(tmp_path), seeds=(11, 12, 13), variants=(None, None, None),
                    task_folder=str(task.parent), task_path=str(task))
    channel = _Recording()
    oracle._compute(job, channel)
    said = channel.said
    reference = said.index("reference outputs")
    sets = said[reference + 1:said.index("reference determinism")]
    assert sets == ["gpu", "gpu", "gpu"]  # before sets 1 and 2, and before the determinism
    profile = said.index("reference profile")
    assert said[profile - 1] == "gpu"
    assert said.count("gpu") == 5  # the first hold, then four checkpoints
    assert said[-1] == "reference"


def test_a_holder_that_takes_its_share_again_lets_a_waiting_timing_in():
    gate = GpuGate()
    checks = Hold(gate, label="1:task:worker")
    checks.shared()
    waiting, took = _timing_waits(gate, held_s=0.2)
    time.sleep(0.2)
    assert not took.is_set()  # the checks hold the GPU
    checks.shared()  # a checkpoint: given up and asked for again, behind the timing
    assert took.is_set() and checks.state == "shared"
    waiting.join(5)
    checks.release()
    assert gate.holders() == (0, False)


def test_a_workers_checks_let_a_timing_go_first_between_sets_and_before_the_decision(
        monkeypatch):
    from kernelevo.candidate import load_candidate
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.parent import session as session_module
    from kernelevo.evaluate.parent.judge import Judge
    from kernelevo.evaluate.shared.messages import CheckedCandidate, Ready
    from kernelevo.task import load_task

    heard: list[str] = []
    answer = session_module.Session._answer

    def recording(self, message):
        if isinstance(message, (Gpu, Ready, CheckedCandidate)) and not self.recheck:
            heard.append(message.kind if not isinstance(message, Gpu) else
                         f"gpu:{self.hold.state}")
        return answer(self, message)

    monkeypatch.setattr(session_module.Session, "_answer", recording)
    config = EvalConfig()
    judge = Judge(load_task(str(ROOT / "tests/fixtures/tasks/add.py")), config)
    verdict = judge.evaluate(load_candidate(ROOT / "tests/fixtures/candidates/honest_add.py"))
    assert verdict.status == "ok", verdict.message
    checks = heard[heard.index("ready") + 1:heard.index(CheckedCandidate.kind)]
    # after each set but set 0 (computed last), before the second step, before the decision;
    # each asked while the worker held its share, taken again behind any waiting timing
    assert checks == ["gpu:shared"] * (config.input_sets - 1 + 2), heard


def test_a_standby_oracles_checkpoint_does_not_wait_for_the_timing_that_waits_for_it():
    """Before its first kernels a standby's oracle waits for the evaluation beside it to time;
    at a checkpoint it holds the GPU, and that timing waits for it: a wait there would be a
    deadlock until the job's limit."""
    from types import SimpleNamespace

    from kernelevo.evaluate.parent.oracle_run import OracleRun

    class _Beside:
        def __init__(self) -> None:
            self.waits = 0

        def wait(self, deadline):
            self.waits += 1
            return None

    gate = GpuGate()
    beside = _Beside()
    config = SimpleNamespace(timeout_s=60.0, import_timeout_s=30.0)
    run = OracleRun(SimpleNamespace(config=config), None, Path("."),
                    Hold(gate, label="2:task:oracle"), beside)
    run._answer(Gpu())  # its first kernels: it waits for the evaluation beside it
    assert beside.waits == 1 and run.hold.state == "shared"
    waiting, took = _timing_waits(gate, label="1:task:worker")
    time.sleep(0.2)
    run._answer(Gpu(brief=True))  # a checkpoint: the timing goes, then the oracle goes on
    assert beside.waits == 1 and took.is_set() and run.hold.state == "shared"
    waiting.join(5)
    run.hold.release()


def test_a_decision_on_the_cpu_gives_the_workers_hold_up_while_it_runs():
    """A comparison with no room on the GPU runs on the CPU (32-63 s a row on a slow
    host); the worker only waits for it, so a timing waiting goes in meanwhile."""
    from types import SimpleNamespace

    from kernelevo.evaluate.parent.session import Session

    gate = GpuGate()
    checks = Hold(gate, label="1:task:worker")
    checks.shared()
    session = SimpleNamespace(hold=checks, _wait_for=lambda take: take())
    waiting, took = _timing_waits(gate)
    time.sleep(0.2)
    assert not took.is_set()  # the checks hold the GPU
    with Session._off_gpu(session):
        assert took.wait(5), "the timing stayed behind a decision on the CPU"
        assert checks.state == "none"
    assert checks.state == "shared"  # held again for the rest of the checks
    waiting.join(5)
    checks.release()
    assert gate.holders() == (0, False)


def test_an_exclusive_hold_is_kept_through_a_decision_on_the_cpu():
    from types import SimpleNamespace

    from kernelevo.evaluate.parent.session import Session

    gate = GpuGate()
    timing = Hold(gate, label="1:task:worker")
    timing.exclusive()
    with Session._off_gpu(SimpleNamespace(hold=timing, _wait_for=lambda take: take())):
        assert timing.state == "exclusive" and gate.holders() == (0, True)
    assert timing.state == "exclusive"
    timing.release()


def test_the_trivial_answers_are_checked_as_the_reference_comes_not_after_the_oracle_exits(
        monkeypatch):
    """A decision waits for the reference's trivial answers; the oracle's process then
    still had to end first (0.5 s at the median on an H100, up to 3 s beside other lanes)."""
    from types import SimpleNamespace

    from kernelevo.evaluate.parent import oracle_run
    from kernelevo.evaluate.shared.messages import OracleDone

    exited, checked_under = threading.Event(), []
    gate = GpuGate()
    config = SimpleNamespace(timeout_s=60.0, import_timeout_s=30.0)
    run = oracle_run.OracleRun(SimpleNamespace(config=config, compare_device="cpu"), None,
                               Path("."), Hold(gate, label="1:task:oracle"), None)

    def check(reference, device):
        checked_under.append(run.hold.state)  # its kernels under the oracle's hold
        return "checked reference"

    def compute():
        run._answer(Gpu(brief=True))
        run._bundle, run._job = {}, object()
        run._answer(object.__new__(OracleDone))  # its last message (its fields unread here);
        # its process goes on to exit
        assert run.checked.wait(5)  # checked while the process has not ended yet
        assert not exited.is_set() and not run.done.is_set()
        exited.set()

    monkeypatch.setattr(oracle_run, "_check_trivial_answers", check)
    monkeypatch.setattr(run, "_reference_from", lambda message, job: "reference")
    monkeypatch.setattr(run, "_compute", compute)
    run.run()
    assert exited.is_set() and run.done.is_set() and run.error is None
    assert run.reference == "checked reference" and checked_under == ["shared"]
    assert "trivial_check" in run.phases
    assert run.hold.state != "shared"  # given up once the process had ended


def test_a_trivial_answers_check_that_fails_fails_the_oracle_as_before(monkeypatch):
    from types import SimpleNamespace

    from kernelevo.evaluate.parent import oracle_run
    from kernelevo.evaluate.shared.messages import OracleDone

    config = SimpleNamespace(timeout_s=60.0, import_timeout_s=30.0)
    run = oracle_run.OracleRun(SimpleNamespace(config=config, compare_device="cpu"), None,
                               Path("."), Hold(GpuGate(), label="1:task:oracle"), None)

    def check(reference, device):
        raise ValueError("no comparison")

    def compute():
        run._bundle, run._job = {}, object()
        run._answer(object.__new__(OracleDone))

    monkeypatch.setattr(oracle_run, "_check_trivial_answers", check)
    monkeypatch.setattr(run, "_reference_from", lambda message, job: "reference")
    monkeypatch.setattr(run, "_compute", compute)
    run.run()
    assert run.checked.is_set() and run.done.is_set()
    assert run.reference is None and "no comparison" in str(run.error)


def test_a_failure_after_the_last_message_waits_for_the_check_before_the_hold_goes(monkeypatch):
    """The oracle's process can still fail after its last message (something it runs writes
    to its channel): the check begun then ends under the oracle's hold, and cannot put a
    reference back once the failure dropped it."""
    from types import SimpleNamespace

    from kernelevo.errors import MessageError
    from kernelevo.evaluate.parent import oracle_run
    from kernelevo.evaluate.shared.messages import OracleDone

    config = SimpleNamespace(timeout_s=60.0, import_timeout_s=30.0)
    run = oracle_run.OracleRun(SimpleNamespace(config=config, compare_device="cpu"), None,
                               Path("."), Hold(GpuGate(), label="1:task:oracle"), None)
    held_at_end = []

    def check(reference, device):
        time.sleep(0.2)  # still checking when the failure comes
        held_at_end.append(run.hold.state)
        return "checked reference"

    def compute():
        run._answer(Gpu(brief=True))
        run._bundle, run._job = {}, object()
        run._answer(object.__new__(OracleDone))
        raise MessageError("a message of kind 'garbage' is none of ...")

    monkeypatch.setattr(oracle_run, "_check_trivial_answers", check)
    monkeypatch.setattr(run, "_reference_from", lambda message, job: "reference")
    monkeypatch.setattr(run, "_compute", compute)
    run.run()
    assert held_at_end == ["shared"]  # the hold went only after the check
    assert run.reference is None and run.error is not None
    time.sleep(0.1)
    assert run.reference is None  # the finished check put nothing back
