"""The GPU's gate: a timing that waits long says who holds the GPU; a timing done goes to
a shared hold at once, not behind the timings queued meanwhile."""

from __future__ import annotations

import logging
import re
import threading
import time

import pytest

from kernelevo.evaluate.parent import gate as gate_module
from kernelevo.evaluate.parent.gate import GateAbandoned, GpuGate, Hold


def test_a_long_timing_wait_logs_each_holder_with_its_state(monkeypatch, caplog):
    monkeypatch.setattr(gate_module, "LONG_WAIT_S", 0.2)
    gate = GpuGate()
    standby = Hold(gate, label="7:recheck:worker")
    standby.about = lambda: "task level1_19, warming up, not yet given candidates"
    plain = Hold(gate, label="8:task:oracle")  # a holder that says nothing of itself
    standby.shared()
    plain.shared()
    timing = Hold(gate, label="9:task:worker")
    took = threading.Thread(target=timing.exclusive)
    with caplog.at_level(logging.WARNING, logger="kernelevo"):
        took.start()
        time.sleep(0.5)
        assert took.is_alive()  # still waiting: both hold the GPU shared
        standby.release()
        plain.release()
        took.join(5)
    assert not took.is_alive() and timing.state == "exclusive"
    timing.release()
    logged = [r.getMessage() for r in caplog.records if "waited" in r.getMessage()]
    assert len(logged) == 1, logged  # once per wait, not once per poll
    # seconds held round to 0 or 1 with the waiter's wake-up on a loaded machine
    assert re.search(r"7:recheck:worker for \d+ s \(task level1_19, warming up, not yet given "
                     r"candidates\)", logged[0]), logged[0]
    assert re.search(r"8:task:oracle for \d+ s(;|$)", logged[0]), logged[0]


def test_a_short_timing_wait_logs_nothing(caplog):
    gate = GpuGate()
    holder = Hold(gate, label="1:task:oracle")
    holder.shared()
    timing = Hold(gate, label="2:task:worker")
    took = threading.Thread(target=timing.exclusive)
    with caplog.at_level(logging.WARNING, logger="kernelevo"):
        took.start()
        time.sleep(0.1)
        holder.release()
        took.join(5)
    timing.release()
    assert not [r for r in caplog.records if "waited" in r.getMessage()]


@pytest.mark.parametrize("given", [False, True])
def test_a_sessions_hold_says_whether_it_judges_or_warms_up(given):
    from kernelevo.evaluate.parent.session import Session

    session = Session.__new__(Session)  # only the fields _about reads
    session.killed, session._given, session.warm = (threading.Event(), threading.Event(),
                                                    threading.Event())
    session.past_timing = threading.Event()
    session._discarded = False
    session.state = object() if given else None
    if given:
        session._given.set()
    session.task = type("T", (), {"name": "level2_71"})()
    said = session._about()
    assert said == ("task level2_71, judging its candidates" if given
                    else "task level2_71, warming up, not yet given candidates")


def _waiting(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    time.sleep(0.2)
    return thread


def test_a_timing_done_holds_the_gpu_shared_at_once_while_another_timing_waits():
    gate = GpuGate()
    done = Hold(gate, label="1:task:worker")
    done.exclusive()
    queued = Hold(gate, label="2:task:worker")
    waiting = _waiting(queued.exclusive)
    assert waiting.is_alive()
    started = time.monotonic()
    done.downgrade()  # no wait: the queued timing would go first were the hold asked again
    assert time.monotonic() - started < 1.0 and done.state == "shared"
    assert gate.holders() == (1, False)
    time.sleep(0.2)
    assert waiting.is_alive()  # the queued timing waits for the profile's shared hold
    newcomer = Hold(gate, label="3:task:oracle")
    entering = _waiting(newcomer.shared)
    assert entering.is_alive()  # and no new shared holder goes before it
    done.release()
    waiting.join(5)
    assert not waiting.is_alive() and queued.state == "exclusive"
    assert entering.is_alive()
    queued.release()
    entering.join(5)
    assert newcomer.state == "shared"
    newcomer.release()
    assert gate.holders() == (0, False)


def test_the_wait_of_a_timing_behind_a_downgraded_hold_is_counted_by_its_label():
    gate = GpuGate()
    done = Hold(gate, label="1:task:worker")
    done.exclusive()
    queued = Hold(gate, label="2:task:worker")
    waiting = _waiting(queued.exclusive)
    done.downgrade()
    time.sleep(0.2)
    done.release()
    waiting.join(5)
    assert queued.waited_on.get("1:task:worker", 0.0) >= 0.15
    queued.release()


def test_downgrading_a_hold_that_is_not_exclusive_takes_a_shared_one():
    gate = GpuGate()
    hold = Hold(gate)
    hold.downgrade()
    assert hold.state == "shared" and gate.holders() == (1, False)
    hold.release()
    with pytest.raises(RuntimeError, match="without the exclusive hold"):
        gate.downgrade()


def test_a_stopped_job_takes_no_new_hold_even_one_free_at_once():
    gate = GpuGate()
    stopped = threading.Event()
    stopped.set()
    hold = Hold(gate, give_up=stopped.is_set, label="4:recheck:worker")
    with pytest.raises(GateAbandoned):
        hold.shared()
    with pytest.raises(GateAbandoned):
        hold.exclusive()
    assert gate.holders() == (0, False) and hold.state == "none"
    with pytest.raises(GateAbandoned):  # no writer left counted as waiting either
        gate.acquire_exclusive(stopped.is_set)
    timing = Hold(gate)
    timing.exclusive()  # nothing stands in its way
    assert timing.state == "exclusive"
    timing.release()


def test_a_discarded_session_answers_no_more_messages_so_its_jobs_and_holds_end():
    from kernelevo.evaluate.parent.session import Session

    session = Session.__new__(Session)  # only what discard() and _on_message touch
    session._closed, session._discarded = False, False
    session.killed = threading.Event()
    killed = []
    session.kill = lambda: killed.append(True)  # type: ignore[method-assign]
    session.close = lambda: None  # type: ignore[method-assign]
    session.discard()
    assert killed and session._discarded
    with pytest.raises(GateAbandoned, match="discarded"):
        session._on_message({"kind": "checked_candidate"})


def test_a_warm_up_timing_turns_urgent_once_a_verdict_waits_for_it():
    """A warm-up's timing for the store waits behind candidates' timings while nobody waits for
    its session; given candidates, it goes before warm-ups nobody waits for (a suite's lanes
    waited up to 141 s a row behind them)."""
    gate = GpuGate()
    holder = Hold(gate, label="1:task:worker")
    holder.shared()
    given = threading.Event()
    order: list[str] = []

    def take(name: str, urgent) -> None:
        hold = Hold(gate, label=name)
        hold.exclusive(urgent=urgent)
        order.append(name)
        time.sleep(0.05)
        hold.release()

    promoted = threading.Thread(target=take, args=("given later", given.is_set))
    promoted.start()
    time.sleep(0.2)
    assert gate._urgent_waiting == 0  # nobody waits for it yet: a warm-up's timing
    idle = threading.Thread(target=take, args=("nobody waits", False))
    idle.start()
    time.sleep(0.2)
    given.set()
    deadline = time.monotonic() + 5
    while gate._urgent_waiting != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gate._urgent_waiting == 1  # asked again while it waits
    holder.release()
    promoted.join(5)
    idle.join(5)
    assert order == ["given later", "nobody waits"]
    assert gate._urgent_waiting == 0 and gate._writers_waiting == 0


def test_a_warm_up_timing_whose_session_has_candidates_already_is_urgent_at_once():
    gate = GpuGate()
    holder = Hold(gate, label="1:task:worker")
    holder.shared()
    waiting = Hold(gate, label="2:task:worker")
    took = threading.Thread(target=waiting.exclusive, kwargs={"urgent": lambda: True})
    took.start()
    time.sleep(0.2)
    assert gate._urgent_waiting == 1
    holder.release()
    took.join(5)
    assert waiting.state == "exclusive"
    waiting.release()
    assert gate._urgent_waiting == 0


def test_a_warm_up_timing_nobody_waits_for_holds_no_new_work_back():
    """Before, every lane's new checks waited behind it until the work in progress ended."""
    gate = GpuGate()
    checking = Hold(gate, label="1:task:worker")
    checking.shared()
    warm_up = Hold(gate, label="2:task:standby")
    waiting = _waiting(lambda: warm_up.exclusive(urgent=False))
    time.sleep(0.2)
    assert waiting.is_alive() and gate._writers_waiting == 1
    newcomer = Hold(gate, label="3:task:oracle")
    entering = _waiting(newcomer.shared)
    entering.join(2)
    assert not entering.is_alive() and newcomer.state == "shared"
    assert gate.holders() == (2, False)
    checking.release()
    time.sleep(0.2)
    assert waiting.is_alive()  # still held by the newcomer's work
    newcomer.release()
    waiting.join(5)
    assert not waiting.is_alive() and warm_up.state == "exclusive"
    warm_up.release()
    assert gate.holders() == (0, False) and gate._writers_waiting == 0


def test_a_warm_up_timing_takes_the_first_moment_no_work_holds_the_gpu():
    """Once the holders of the moment are done, the waiting warm-up's timing goes before work
    that asked meanwhile, or a steady stream of checks would keep it waiting until urgent."""
    gate = GpuGate()
    timing = Hold(gate, label="1:task:worker")
    timing.exclusive()
    warm_up = Hold(gate, label="2:task:standby")
    order: list[str] = []

    def take_warm_up() -> None:
        warm_up.exclusive(urgent=False)
        order.append("warm-up")
        time.sleep(0.1)
        warm_up.release()

    def take_shared() -> None:
        newcomer.shared()
        order.append("check")
        newcomer.release()

    waiting = _waiting(take_warm_up)
    newcomer = Hold(gate, label="3:task:oracle")
    entering = _waiting(take_shared)
    time.sleep(0.2)
    assert waiting.is_alive() and entering.is_alive()  # the candidate's timing holds it alone
    timing.release()
    waiting.join(5)
    entering.join(5)
    assert order == ["warm-up", "check"]
    assert gate.holders() == (0, False) and gate._writers_waiting == 0


def test_an_urgent_timing_still_holds_new_work_back():
    gate = GpuGate()
    checking = Hold(gate, label="1:task:worker")
    checking.shared()
    queued = Hold(gate, label="2:task:worker")
    waiting = _waiting(queued.exclusive)
    newcomer = Hold(gate, label="3:task:oracle")
    entering = _waiting(newcomer.shared)
    time.sleep(0.2)
    assert waiting.is_alive() and entering.is_alive()
    checking.release()
    waiting.join(5)
    assert queued.state == "exclusive" and entering.is_alive()
    queued.release()
    entering.join(5)
    assert newcomer.state == "shared"
    newcomer.release()
