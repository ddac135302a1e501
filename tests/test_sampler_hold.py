"""The gpu measure's hold: a sample the host queued after the stream's sleep ended is retaken.

The GPU sampler is driven here with stand-ins for CUDA's events, sleep and
synchronisation on the host's clock: the hold is queued without blocking and
ends on the "device" exactly its length after its first event, and the
call's host time is whatever the call spends. The
real sampler's decisions (retake, longer hold, give up) run unchanged; the
GPU tests time the same path on a device.
"""

import time

import pytest
import torch

from kernelevo.evaluate.child import samplers
from kernelevo.evaluate.child.samplers import RETAKES, Sampler


class _Event:
    def __init__(self) -> None:
        self.at = 0.0

    def record(self) -> None:
        self.at = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, later: "_Event") -> float:
        return (later.at - self.at) * 1e3


class _Sleeper:
    """Queues a hold without blocking, as the sleep kernel does."""

    def __init__(self) -> None:
        self.holds: list[float] = []

    def sleep(self, ms: float) -> None:
        self.holds.append(ms)


class _Awake(_Event):
    """The event after the hold: the device meets it when the hold has run."""

    def __init__(self, asleep: _Event, sleeper: _Sleeper) -> None:
        super().__init__()
        self.asleep, self.sleeper = asleep, sleeper

    def record(self) -> None:
        self.at = self.asleep.at + self.sleeper.holds[-1] / 1e3


def _sampler(monkeypatch) -> Sampler:
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    sampler = Sampler.__new__(Sampler)
    sampler.flush = torch.empty(16, dtype=torch.int8)
    sampler.load = lambda set_index: None
    sampler.shares = {}
    sampler.sleeper = _Sleeper()
    for name in ("start", "end", "settled", "asleep"):
        setattr(sampler, name, _Event())
    sampler.awake = _Awake(sampler.asleep, sampler.sleeper)
    sampler.retaken = sampler.late = 0
    sampler.waiting = set()
    return sampler


def _host_bound(ms_per_call: list[float]):
    """A call that spends the next of these host milliseconds (the last one repeats)."""
    left = list(ms_per_call)

    def call():
        spent = left.pop(0) if len(left) > 1 else left[0]
        time.sleep(spent / 1e3)
        return spent
    return call


def test_a_call_queued_inside_the_hold_is_sampled_once(monkeypatch):
    sampler = _sampler(monkeypatch)
    _, _, output = sampler.sample(_host_bound([0.0]), 0, hold_ms=20.0)
    assert output == 0.0
    assert sampler.sleeper.holds == [20.0] and (sampler.retaken, sampler.late) == (0, 0)


def test_a_retake_that_fits_ends_the_sample(monkeypatch):
    monkeypatch.setattr(samplers, "MAX_HOLD_MS", 200.0)
    sampler = _sampler(monkeypatch)
    # 15 ms of host time against a 1 ms hold: the device would have waited for the host
    event_ms, _, output = sampler.sample(_host_bound([15.0, 15.0]), 0, hold_ms=1.0)
    first, second = sampler.sleeper.holds
    assert first == 1.0 and 30.05 <= second < 60.0  # twice the host's time, plus 0.05 ms
    assert (sampler.retaken, sampler.late) == (1, 0)
    assert output == 15.0 and event_ms >= 15.0  # the stand-in's events keep host time


def test_a_call_slower_than_any_hold_is_counted_late_after_the_retakes(monkeypatch):
    monkeypatch.setattr(samplers, "MAX_HOLD_MS", 2.0)
    sampler = _sampler(monkeypatch)
    sampler.sample(_host_bound([10.0]), 0, hold_ms=0.5)
    assert len(sampler.sleeper.holds) == RETAKES + 1
    assert sampler.sleeper.holds[1:] == [2.0] * RETAKES  # capped
    assert (sampler.retaken, sampler.late) == (RETAKES, 1)


def test_a_call_that_waits_for_the_device_is_retaken_once_then_never(monkeypatch):
    """A synchronising call's host time always outlasts the hold: retakes would only
    multiply its samples' cost."""
    sampler = _sampler(monkeypatch)

    def synchronising():  # waits for the hold to end on the device, then works 2 ms
        time.sleep(max(0.0, sampler.awake.at - time.perf_counter()) + 0.002)

    sampler.sample(synchronising, 0, hold_ms=1.0)
    assert len(sampler.sleeper.holds) == RETAKES + 1
    sampler.sample(synchronising, 1, hold_ms=1.0)
    sampler.sample(synchronising, 0, hold_ms=1.0)
    assert len(sampler.sleeper.holds) == RETAKES + 3  # one try each now
    assert (sampler.retaken, sampler.late) == (RETAKES, 3)
    sampler.sample(_host_bound([0.0]), 0, hold_ms=1.0)  # another call keeps its retakes
    assert sampler.late == 3


@pytest.mark.parametrize("rates", [[300.0, 1900.0, 1500.0]])
def test_the_sleeper_keeps_its_fastest_calibration(monkeypatch, rates):
    """Calibrated while the clock is still low, a hold would be several times too short."""
    ms = iter(1e6 / (r * 1e3) for r in rates)  # 1M cycles at r MHz, in ms

    class Timed(_Event):
        def elapsed_time(self, later):
            return next(ms)

    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None)
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: Timed())
    sleeper = samplers.Sleeper()
    assert sleeper.cycles_per_ms == pytest.approx(1900e3)
