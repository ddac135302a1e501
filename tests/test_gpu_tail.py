"""The gpu measure's tail: work left running past the end event, told from the host's own delay.

A sample's tail runs from its end event to a point the host records once it is
back from synchronising the device. Session 25's H100 run read a plain
candidate (cuBLAS, then one Triton kernel, one stream) at 78 us against 19 us
of event time: its median tail, the host's delay, crossed the threshold. The
sampler is replaced here by one that hands out chosen event and tail times per
contestant, so the decision runs unchanged on the CPU.
"""

import pytest
import torch

from kernelevo.config import TimingConfig
from kernelevo.evaluate.child import timing
from kernelevo.evaluate.child.timing import host_tail_ms, time_contestants


class _ChosenTimes:
    """A sampler whose gpu samples take the (event ms, tail ms) given per contestant."""

    times: dict[str, list[tuple[float, float]]] = {}

    def __init__(self, arena, sets, load=None) -> None:
        self.shares: dict[str, int] = {}
        self.retaken = self.late = 0
        self.taken: dict[str, int] = {}

    def sample(self, call, set_index, hold_ms):
        name = call()
        index = self.taken.get(name, 0)
        self.taken[name] = index + 1
        event, tail = self.times[name][index % len(self.times[name])]
        return event, tail, name

    def loop(self, call, set_index, calls):
        return 0.05, call()


def _run(monkeypatch, times: dict[str, list[tuple[float, float]]]):
    monkeypatch.setattr(timing, "HostSampler", _ChosenTimes)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _ChosenTimes.times = times
    contestants = {name: (lambda *_, name=name: name) for name in times}
    config = TimingConfig(warmup_ms=1.0, call_loop_ms=0.5, call_target_ms=2.0, min_samples=12,
                         max_samples=12)
    return time_contestants(contestants, [[torch.ones(4)]], config, lambda *_: None)


def test_a_host_delay_in_every_contestants_tail_is_not_read_as_work_after_the_end_event(
        monkeypatch) -> None:
    # Session 25's l2_81: 19 us of events and a median tail of about 59 us, the
    # host's (one stream); here the baseline's tails hold the same delay.
    run = _run(monkeypatch, {"eager": [(0.0365, 0.058), (0.0365, 0.060)],
                             "candidate_0": [(0.0191, 0.059), (0.0191, 0.061)]})
    gpu = run.measures["gpu"]
    assert gpu["candidate_0"].median_ms == pytest.approx(0.0191)
    assert gpu["candidate_0"].method == "events"
    assert not run.flags
    # the rounds a speedup's interval is drawn from hold the same times as the stats
    assert list(run.rounds["gpu"]["candidate_0"].values()) == pytest.approx([0.0191] * 12)


def test_work_left_past_the_end_event_is_timed_beyond_the_hosts_own_delay(monkeypatch) -> None:
    run = _run(monkeypatch, {"eager": [(0.040, 0.010)],
                             "candidate_0": [(0.005, 0.210)]})  # a side stream's 0.2 ms
    gpu = run.measures["gpu"]
    assert run.flags == ["candidate_0_work_after_end_event"]
    assert gpu["candidate_0"].method == "events+tail"
    assert gpu["candidate_0"].median_ms == pytest.approx(0.005 + 0.200)
    assert list(run.rounds["gpu"]["candidate_0"].values()) == pytest.approx([0.205] * 12)
    assert gpu["eager"].median_ms == pytest.approx(0.040)
    assert any("the host's own 0.010 ms left out" in note for note in run.notes)


def test_alone_a_contestants_whole_tail_counts() -> None:
    assert host_tail_ms({"candidate_0": [0.2, 0.3, 0.25]}) == 0.0
    assert host_tail_ms({"eager": [0.01, 0.03, 0.02], "candidate_0": [0.2, 0.3]}) == \
        pytest.approx(0.02)
    assert host_tail_ms({"eager": [], "candidate_0": [0.2, 0.3]}) == 0.0
