"""Other jobs stand still while a launch-bound call is timed (sandbox/quiet.py and its wiring)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from kernelevo.config import TimingConfig
from kernelevo.evaluate.child import host_speed, timing
from kernelevo.evaluate.parent.gate import GpuGate, Hold
from kernelevo.evaluate.parent.session import Session
from kernelevo.evaluate.sandbox.quiet_load import QuietLoad
from kernelevo.evaluate.sandbox import quiet
from kernelevo.evaluate.shared.messages import WORKER_KINDS, HostQuiet, Sender, decode
from kernelevo.evaluate.shared.replies import QuietReply

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")


def _state(pid: int) -> str:
    """The process's state letter in /proc (T: stopped)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, wanted: set[str], timeout_s: float = 5.0) -> str:
    deadline = time.monotonic() + timeout_s
    state = _state(pid)
    while state not in wanted and time.monotonic() < deadline:
        time.sleep(0.01)
        state = _state(pid)
    return state


class _Limit:
    def __init__(self) -> None:
        self.at = time.monotonic() + 100.0


@pytest.fixture
def jobs():
    """Three live 'jobs' (each its own session, as the sandbox's are), registered; all gone after."""
    started = []
    for _ in range(3):
        started.append(subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"],
                                        start_new_session=True))
    limits = {process.pid: _Limit() for process in started}
    for pid, limit in limits.items():
        quiet.register(pid, limit)
    yield started, limits
    for process in started:
        quiet.unregister(process.pid)
        process.kill()
        process.wait()
    assert quiet.held() == []


def test_a_timing_stands_every_other_job_still_and_continues_them_with_their_limits_lengthened(jobs):
    started, limits = jobs
    timer, others = started[0].pid, [p.pid for p in started[1:]]
    before = {pid: limits[pid].at for pid in limits}
    quiet.timing(timer, True)
    assert quiet.hold_others(timer) == 2
    for pid in others:
        assert _wait_state(pid, {"T"}) == "T"
    assert _state(timer) != "T"  # the timing job itself runs on
    time.sleep(0.3)
    quiet.release(timer)
    for pid in others:
        assert _wait_state(pid, {"S", "R"}) in {"S", "R"}
        # the time it stood still is not counted against its limit
        assert limits[pid].at - before[pid] >= 0.25
        assert limits[pid].at != float("inf")
    assert limits[timer].at == before[timer]
    quiet.timing(timer, False)


def test_leaving_the_timing_phase_ends_its_quiet_and_a_job_timing_on_another_gpu_is_never_held(jobs):
    started, _ = jobs
    first, second, third = (p.pid for p in started)
    quiet.timing(first, True)
    quiet.timing(second, True)  # another GPU's timing, at the same time
    assert quiet.hold_others(first) == 1
    assert quiet.held() == [third]
    assert _state(second) != "T"
    quiet.timing(first, False)  # its hold on the GPU went back to shared
    assert quiet.held() == []
    assert _wait_state(third, {"S", "R"}) in {"S", "R"}
    quiet.timing(second, False)


def test_two_timings_asking_release_the_others_only_once_both_let_go(jobs):
    started, _ = jobs
    first, second, third = (p.pid for p in started)
    quiet.timing(first, True)
    quiet.timing(second, True)
    quiet.hold_others(first)
    quiet.hold_others(second)
    quiet.release(first)
    assert quiet.held() == [third]
    quiet.release(second)
    assert quiet.held() == []
    quiet.timing(first, False)
    quiet.timing(second, False)


def test_a_job_started_while_others_stand_still_is_held_as_it_registers_and_ending_continues_it(jobs):
    started, _ = jobs
    timer = started[0].pid
    quiet.timing(timer, True)
    quiet.hold_others(timer)
    late = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"],
                            start_new_session=True)
    try:
        quiet.register(late.pid, _Limit())
        assert late.pid in quiet.held()
        assert _wait_state(late.pid, {"T"}) == "T"
        time.sleep(0.2)
        quiet.ending(late.pid)  # being ended: continued first, so it can exit
        assert late.pid not in quiet.held()
        assert _wait_state(late.pid, {"S", "R"}) in {"S", "R"}
        quiet.hold_others(timer)  # never stopped again
        assert late.pid not in quiet.held()
        assert quiet.unregister(late.pid) >= 0.15  # the seconds it stood, in all
    finally:
        late.kill()
        late.wait()
        quiet.release(timer)
        quiet.timing(timer, False)


def test_the_hold_says_when_it_holds_the_gpu_alone_and_when_not():
    changes: list[bool] = []
    hold = Hold(GpuGate(), label="1:task:worker")
    hold.on_exclusive = changes.append
    hold.shared()
    hold.exclusive()
    hold.downgrade()
    hold.exclusive()
    hold.release()
    hold.release()
    assert changes == [True, False, True, False]


def test_the_session_grants_quiet_only_to_a_worker_holding_the_gpu_alone(monkeypatch):
    asked: list[tuple[str, int]] = []
    monkeypatch.setattr(quiet, "hold_others", lambda pid: asked.append(("hold", pid)) or 4)
    cut = {"s": 0.0}
    monkeypatch.setattr(quiet, "release", lambda pid: asked.append(("release", pid)) or cut["s"])
    session = SimpleNamespace(deadline=SimpleNamespace(pid=1234), hold=SimpleNamespace(state="shared"),
                              _quiet_load=QuietLoad())
    assert Session._host_quiet(session, True) == QuietReply(held=0)  # a check: no quiet
    session.hold.state = "exclusive"
    assert Session._host_quiet(session, True) == QuietReply(held=4)
    assert Session._host_quiet(session, False) == QuietReply(held=0)
    assert asked == [("release", 1234), ("hold", 1234), ("release", 1234)]
    assert session._quiet_load.seconds > 0  # the granted quiet was measured, the refused not
    cut["s"] = 10.0  # a quiet the judge had cut: the worker hears it as it lets go
    assert Session._host_quiet(session, False) == QuietReply(held=0, cut_s=10.0)


def test_a_quiet_is_cut_after_most_s_and_the_timing_asks_in_vain_until_it_leaves_timing(
        jobs, monkeypatch):
    monkeypatch.setattr(quiet, "MOST_S", 1.0)
    started, limits = jobs
    timer, others = started[0].pid, [p.pid for p in started[1:]]
    quiet.timing(timer, True)
    asked = time.monotonic()
    assert quiet.hold_others(timer) == 2
    for pid in others:
        assert _wait_state(pid, {"T"}) == "T"
    while quiet.held() and time.monotonic() < asked + 10:  # the timing never lets go: the judge does
        time.sleep(0.02)
    assert quiet.held() == [] and time.monotonic() - asked >= 1.0
    for pid in others:
        assert _wait_state(pid, {"S", "R"}) in {"S", "R"}
        assert limits[pid].at != float("inf")
    assert quiet.hold_others(timer) == 0  # refused while this hold lasts
    assert quiet.held() == []
    assert quiet.release(timer) == 1.0  # said so as it lets go
    quiet.timing(timer, False)  # its hold on the GPU went back to shared
    quiet.timing(timer, True)  # a later timing may ask again, cut off as late
    assert quiet.hold_others(timer) == 2
    assert quiet.release(timer) == 0.0
    assert quiet.held() == []
    quiet.timing(timer, False)


def test_asks_in_one_hold_share_its_ten_seconds_and_the_next_hold_has_its_own(jobs, monkeypatch):
    monkeypatch.setattr(quiet, "MOST_S", 2.0)
    started, _ = jobs
    timer = started[0].pid
    quiet.timing(timer, True)
    first = time.monotonic()
    quiet.hold_others(timer)
    assert quiet.release(timer) == 0.0  # let go in time
    time.sleep(1.0)
    assert quiet.hold_others(timer) == 2  # asked again in the same hold
    while quiet.held() and time.monotonic() < first + 10:
        time.sleep(0.02)
    # cut by the hold's first ask's limit (2 s after it), not by this ask's (3 s)
    assert quiet.held() == [] and time.monotonic() - first < 2.9
    assert quiet.hold_others(timer) == 0
    assert quiet.release(timer) == 2.0
    quiet.timing(timer, False)
    quiet.timing(timer, True)  # the next hold
    assert quiet.hold_others(timer) == 2
    assert quiet.release(timer) == 0.0
    quiet.timing(timer, False)


def test_the_worker_may_send_host_quiet_and_read_the_reply():
    message = decode({"kind": "host_quiet", "on": False}, WORKER_KINDS)
    assert message == HostQuiet(on=False)
    assert QuietReply.from_json({"held": 3}).held == 3


class _Channel:
    def __init__(self, held: int) -> None:
        self.held, self.asked = held, []

    def ask(self, kind: str, **fields):
        self.asked.append((kind, fields))
        return {"held": self.held} if fields.get("on") else {}


def test_the_call_measure_is_timed_inside_the_quiet_and_the_gpu_measure_is_not(monkeypatch):
    channel = _Channel(held=5)
    asker = host_speed.QuietHost(Sender(channel), asks=True)
    entered: list[int] = []  # the asks made when the call measure began
    original = timing._call_time
    monkeypatch.setattr(timing, "_call_time",
                        lambda *a, **k: (entered.append(len(channel.asked)), original(*a, **k))[1])
    config = TimingConfig(warmup_ms=1, target_ms=2, min_samples=2, max_samples=4, call_loop_ms=0.5,
                          call_target_ms=2)
    x = torch.ones(8)
    timing.time_contestants({"eager": lambda v: v + 1, "candidate_0": lambda v: v + 1}, [[x]],
                            config, lambda *_: None, quiet=asker)
    # asked once, on, right before the call rounds (not before the gpu measure); off after
    assert [fields["on"] for _, fields in channel.asked] == [True, False]
    assert entered == [1]
    assert asker.most == 5
    assert "5 at most" in asker.note()


def test_a_quiet_cut_short_is_said_in_the_note():
    class Cut(_Channel):
        def ask(self, kind: str, **fields):
            self.asked.append((kind, fields))
            return {"held": self.held} if fields.get("on") else {"cut_s": 10.0}

    asker = host_speed.QuietHost(Sender(Cut(held=3)), asks=True)
    with asker():
        pass
    assert asker.cut_s == 10.0
    assert "longer than the 10 s" in asker.note()


def test_a_quiet_host_that_may_not_ask_asks_nothing():
    channel = _Channel(held=2)
    asker = host_speed.QuietHost(Sender(channel), asks=False)
    with asker() as held:
        assert held == 0
    assert channel.asked == [] and asker.note() is None


def tick_for(payload, channel):
    """A job that counts into a file for `seconds` of its own running time, then ends."""
    import os as _os
    import time as _time

    path, ran, count = payload["path"], 0.0, 0
    while ran < payload["seconds"]:
        step = _time.monotonic()
        _time.sleep(0.01)
        gap = _time.monotonic() - step
        ran += min(gap, 0.05)  # a stretch stood still is not running time
        count += 1
        with open(path + ".tmp", "w") as out:
            out.write(str(count))
        _os.replace(path + ".tmp", path)


def test_a_sandboxed_job_stands_still_whole_and_is_not_timed_out_for_it(tmp_path):
    import threading

    from kernelevo.evaluate.sandbox.jobs import Deadline, run_job

    deadline, done = Deadline(), {}
    scratch = tmp_path / "job"
    counter = scratch / "work" / "count"
    worker = threading.Thread(target=lambda: done.update(result=run_job(
        tick_for, {"path": str(counter), "seconds": 1.0}, scratch, timeout_s=60.0,
        output_limit_bytes=1 << 20, deadline=deadline)))
    worker.start()
    limit = time.monotonic() + 30
    while not counter.exists() and time.monotonic() < limit:
        time.sleep(0.02)
    assert counter.exists(), "the job never started counting"
    deadline.restart(2.0)  # its limit from now: well past its second of counting
    owner = -1  # a timing job of no process here
    try:
        assert quiet.hold_others(owner) >= 1
        time.sleep(0.3)
        frozen = counter.read_text()
        time.sleep(3.0)  # longer than the job's limit: only its running time counts
        assert counter.read_text() == frozen  # every process of the job stood still
    finally:
        quiet.release(owner)
    worker.join(30)
    result = done["result"]
    assert not result.timed_out and result.exit_code == 0, result.log_tail
    assert 3.0 <= result.stood_s < 10.0  # for the suite's breakdown of where time goes
    assert int(counter.read_text()) > int(frozen)
    assert quiet.held() == []
