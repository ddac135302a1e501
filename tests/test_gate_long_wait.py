"""A timing phase that waits long for the GPU says who holds it, and what each holder does."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from kernelevo.evaluate.parent import gate as gate_module
from kernelevo.evaluate.parent.gate import GpuGate, Hold


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
    assert "7:recheck:worker for 0 s (task level1_19, warming up, not yet given candidates)" \
        in logged[0]
    assert "8:task:oracle for 0 s" in logged[0] and "8:task:oracle for 0 s (" not in logged[0]


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
    session.state = object() if given else None
    if given:
        session._given.set()
    session.task = type("T", (), {"name": "level2_71"})()
    said = session._about()
    assert said == ("task level2_71, judging its candidates" if given
                    else "task level2_71, warming up, not yet given candidates")
