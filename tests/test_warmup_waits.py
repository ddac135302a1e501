"""The warm-up's waits for the GPU are steps of their own, not the compile's or the store's."""

from __future__ import annotations

import time

import pytest
import torch

from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.evaluate.child import store_timing
from kernelevo.evaluate.child.baselines import Baselines, warm_baselines
from kernelevo.evaluate.shared.messages import BaselineTimes, StoredBaselines, WorkerJob
from kernelevo.evaluate.shared.replies import BaselinesReply
from kernelevo.suite.time_spent import PHASE_GROUPS

WAIT_S = 0.6


class _SlowToComeBack:
    """A GPU hold that comes back only after WAIT_S (another lane times meanwhile)."""

    def __init__(self) -> None:
        self.asked = 0

    def cpu_only(self) -> None:
        pass

    def kernels(self) -> None:
        self.asked += 1
        time.sleep(WAIT_S)


class _Tiny:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    @staticmethod
    def get_inputs() -> list[torch.Tensor]:
        return [torch.randn(8, 8)]

    @staticmethod
    def get_init_inputs() -> list:
        return []


def test_the_compiles_wait_for_the_gpu_is_not_its_compile_time(tmp_path, monkeypatch) -> None:
    import torch._inductor.config  # noqa: F401 - its first import is seconds, not the point

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: model)  # no compile at all
    job = WorkerJob(task_source="x = 1", device="cpu", dtype="float32", scratch=str(tmp_path),
                    time=True, timing=EvalConfig().timing)
    hold = _SlowToComeBack()
    baselines = warm_baselines(_Tiny, job, hold)
    assert "compile" in baselines.contestants, baselines.notes
    assert hold.asked == 1
    assert baselines.steps["compile_gpu_wait"] >= WAIT_S
    # the "compile" was the identity on an 8x8 input: its own seconds are next to none
    assert baselines.compile_s is not None and baselines.compile_s < WAIT_S / 2


class _Task(_Tiny):
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            time.sleep(0.05)  # far slower than the store's minimum: timed for the store
            return x * 2


class _Judge:
    """The judge's side of the channel: the GPU alone after WAIT_S, shared again after WAIT_S."""

    def __init__(self) -> None:
        self.asked: list = []

    def ask(self, message):
        self.asked.append(type(message))
        time.sleep(WAIT_S)
        if isinstance(message, StoredBaselines):
            return BaselinesReply(time_them=True).to_json()
        return {"kind": "granted"}

    def send(self, message) -> None:
        pass


def test_the_store_timings_waits_for_the_gpu_are_counted_apart() -> None:
    judge = _Judge()
    timing = TimingConfig(warmup_ms=1, target_ms=20, min_samples=1, max_samples=2,
                          call_loop_ms=1, call_target_ms=2)
    job = WorkerJob("x = 1", "cpu", "float32", "/w", True, timing)
    waits: dict[str, float] = {}
    started = time.perf_counter()
    reply = store_timing.stored_or_timed(_Task, job, Baselines({"eager": _Task.Model()}, [],
                                                                None, {}), judge, waits)
    elapsed = time.perf_counter() - started
    assert judge.asked == [StoredBaselines, BaselineTimes]
    assert reply.measures  # timed for the store
    assert 2 * WAIT_S <= waits["store_gate_wait"] < elapsed


def test_the_summary_counts_every_warm_up_wait_once() -> None:
    gate = PHASE_GROUPS["waits for the GPU's timing gate"]
    assert {"warmup_gpu_wait", "warmup_compile_gpu_wait", "warmup_store_gate_wait",
            "ready_gate_wait"} <= set(gate)
    # a standby's yield happens inside its compile's wait: not counted twice
    assert "warmup_yield" not in gate
    named = [phase for phases in PHASE_GROUPS.values() for phase in phases]
    assert len(named) == len(set(named))


class _Settings(_Task):
    class Model(torch.nn.Module):
        seen: list = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.seen.append(torch.backends.cudnn.allow_tf32)
            time.sleep(0.05)
            return x * 2


class _Answers(_Judge):
    def ask(self, message):
        self.asked.append(type(message))
        if isinstance(message, StoredBaselines):
            return BaselinesReply(time_them=True).to_json()
        return {"kind": "granted"}


@pytest.mark.parametrize("conv_tf32", [True, False])
def test_the_store_times_baselines_as_the_timing_phase_does_and_then_as_the_checks_do(
        conv_tf32, monkeypatch) -> None:
    """Stored under the checks' fp32 convolutions, a convolution's baselines read 1.9-3.6x
    the times the drift probe found beside the candidate (five level-2 tasks, an H100)."""
    from dataclasses import replace

    timing = TimingConfig(warmup_ms=1, target_ms=20, min_samples=1, max_samples=2,
                          call_loop_ms=1, call_target_ms=2)
    job = WorkerJob("x = 1", "cpu", "float32", "/w", True, replace(timing, conv_tf32=conv_tf32))
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # the warm-up's
    model = _Settings.Model()
    model.seen.clear()
    reply = store_timing.stored_or_timed(_Settings, job, Baselines({"eager": model}, [], None,
                                                                   {}), _Answers())
    assert reply.measures
    assert model.seen and set(model.seen) == {conv_tf32}
    assert torch.backends.cudnn.allow_tf32 is False  # the checks run as before
