"""Baselines too quick for stored times to stand in are neither looked up nor timed for the store."""

from __future__ import annotations

import time

import torch

from kernelevo.config import TimingConfig
from kernelevo.evaluate.analysis.baseline_drift import STORED_MIN_MS
from kernelevo.evaluate.child import store_timing
from kernelevo.evaluate.child.baselines import Baselines
from kernelevo.evaluate.shared.messages import StoredBaselines, WorkerJob
from kernelevo.evaluate.shared.replies import BaselinesReply

LIMIT_S = store_timing.SURELY_SHORT_SHARE * STORED_MIN_MS / 1e3


class _Calls:
    """A call that takes the given seconds, one after another (the last one repeating)."""

    def __init__(self, *seconds: float) -> None:
        self.seconds, self.count, self.syncs = list(seconds), 0, 0

    def __call__(self) -> None:
        pause = self.seconds[min(self.count, len(self.seconds) - 1)]
        self.count += 1
        deadline = time.perf_counter() + pause
        while time.perf_counter() < deadline:
            pass

    def sync(self) -> None:
        self.syncs += 1


def test_a_quick_call_is_surely_short_and_each_call_is_synchronised() -> None:
    call = _Calls(0.0)
    assert store_timing.surely_short(call, call.sync)
    assert call.count == 6 and call.syncs == 6  # one set-up call, then five timed


def test_a_call_near_the_stored_minimum_is_not_short() -> None:
    call = _Calls(1.2 * LIMIT_S)
    assert not store_timing.surely_short(call, call.sync)
    assert call.count == 16 and call.syncs == 7  # the loop of ten, synchronised once


class _Overlapped(_Calls):
    """Lone calls wait for their end; back to back, each queues while the last runs."""

    def __init__(self, lone: float, queued: float) -> None:
        super().__init__(lone)
        self.queued, self.pending = queued, False

    def __call__(self) -> None:
        self.seconds = [self.queued if self.pending else self.seconds[0]]
        self.pending = True
        super().__call__()

    def sync(self) -> None:
        super().sync()
        self.pending = False


def test_a_lone_call_slowed_by_its_launch_and_wait_is_decided_by_a_loop() -> None:
    quick_in_a_loop = _Overlapped(lone=1.5 * LIMIT_S, queued=0.3 * LIMIT_S)
    assert store_timing.surely_short(quick_in_a_loop, quick_in_a_loop.sync)
    slow_in_a_loop = _Overlapped(lone=1.5 * LIMIT_S, queued=1.2 * LIMIT_S)
    assert not store_timing.surely_short(slow_in_a_loop, slow_in_a_loop.sync)
    far_too_slow = _Overlapped(lone=5 * LIMIT_S, queued=0.3 * LIMIT_S)
    assert not store_timing.surely_short(far_too_slow, far_too_slow.sync)
    assert far_too_slow.count == 3  # no loop for a call that slow


def test_a_slow_first_call_and_one_slow_call_later_leave_a_quick_task_short() -> None:
    # the set-up call is not timed; of the timed ones the fastest counts
    call = _Calls(0.05, 0.0, 2 * LIMIT_S, 0.0, 0.0, 0.0)
    assert store_timing.surely_short(call, call.sync)


def test_a_second_call_far_too_slow_ends_the_estimate() -> None:
    call = _Calls(0.0, 5 * LIMIT_S)
    assert not store_timing.surely_short(call, call.sync)
    assert call.count == 3  # the set-up call, then two timed


def test_one_call_far_too_slow_among_quick_ones_leaves_the_task_short() -> None:
    # a quick call that met another lane's kernels on the GPU
    call = _Calls(0.0, 5 * LIMIT_S, 0.0, 0.0, 0.0, 0.0)
    assert store_timing.surely_short(call, call.sync)


class _Task:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    @staticmethod
    def get_inputs() -> list[torch.Tensor]:
        return [torch.randn(8, 8)]

    @staticmethod
    def get_init_inputs() -> list:
        return []


class _Slow(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(3 * LIMIT_S)
        return x


class _Channel:
    def __init__(self) -> None:
        self.asked: list = []

    def ask(self, message):
        self.asked.append(message)
        return BaselinesReply(measures={"call": {}}).to_json()

    def send(self, message) -> None:
        self.asked.append(message)


def _job() -> WorkerJob:
    return WorkerJob("x = 1", "cpu", "float32", "/w", True, TimingConfig())


def test_the_warm_up_skips_the_store_for_a_short_baseline() -> None:
    channel = _Channel()
    baselines = Baselines({"eager": _Task.Model()}, [], None, {})
    reply = store_timing.stored_or_timed(_Task, _job(), baselines, channel)
    assert reply == BaselinesReply() and channel.asked == []


def test_the_warm_up_asks_the_store_for_a_slow_baseline() -> None:
    channel = _Channel()
    baselines = Baselines({"eager": _Slow()}, [], None, {})
    reply = store_timing.stored_or_timed(_Task, _job(), baselines, channel)
    assert [type(m) for m in channel.asked] == [StoredBaselines]
    assert reply.measures == {"call": {}}
