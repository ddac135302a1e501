"""The timed calls pass through no launch hook; a candidate's launches are counted apart.

EVALUATION.md: the timed path adds nothing a plain process does not, no hooks
on the launch path. The launch count that catches an output cached on a
loop's unchanged inputs is taken in a few untimed calls after the timing.
"""

from __future__ import annotations

import contextlib

import torch

from kernelevo.config import TimingConfig
from kernelevo.evaluate.child import guards
from kernelevo.evaluate.child.launch_check import LOOP_CALLS, skipped_work
from kernelevo.evaluate.child.timing import time_contestants

QUICK = TimingConfig(warmup_ms=1.0, target_ms=1.0, min_samples=4, max_samples=4,
                     call_loop_ms=1.0, call_target_ms=1.0)


class _Launcher:
    """Stands in for Triton: a launch counts only while the switch's hook is on."""

    def __init__(self) -> None:
        self.hooked, self.count, self.seen = True, 0, []

    @contextlib.contextmanager
    def unhooked(self):
        self.hooked = False
        try:
            yield
        finally:
            self.hooked = True

    def launch(self, who: str) -> None:
        self.seen.append((who, self.hooked))
        if self.hooked:
            self.count += 1


def _contestants(launcher: _Launcher):
    def eager(x):
        return x * 2

    def honest(x):
        launcher.launch("honest")
        return x * 2

    cached: dict[tuple[int, int], torch.Tensor] = {}

    def caching(x):  # its output kept while its input is unchanged (a loop of calls)
        key = (x.data_ptr(), x._version)  # loading another set writes the input: a new key
        if key not in cached:
            launcher.launch("caching")
            cached[key] = x * 2
        return cached[key]

    return {"eager": eager, "candidate_0": honest, "candidate_1": caching}


def test_timed_calls_run_unhooked_and_the_count_comes_after():
    launcher = _Launcher()
    sets = [[torch.randn(64)] for _ in range(3)]
    run = time_contestants(_contestants(launcher), sets, QUICK, lambda *_: None,
                           launches=lambda: launcher.count, unhooked=launcher.unhooked)
    honest = [hooked for who, hooked in launcher.seen if who == "honest"]
    # the warm-up and every timed call unhooked; then one call and a loop, counted
    assert honest[-(1 + LOOP_CALLS):] == [True] * (1 + LOOP_CALLS)
    timed = honest[:-(1 + LOOP_CALLS)]
    assert len(timed) > 8 and not any(timed)
    assert run.launches["gpu"]["candidate_0"] == 1
    assert run.launches["call"]["candidate_0"] == 1
    assert skipped_work(run.launches, "candidate_0") is None
    # the cache: one launch in a single call (a new input), none in the loop's repeats
    assert "work skipped on repeated calls" in skipped_work(run.launches, "candidate_1")
    assert "eager" not in run.launches["gpu"]  # baselines launch none of a candidate's


def test_without_a_count_nothing_is_called_beyond_the_timing():
    launcher = _Launcher()
    run = time_contestants(_contestants(launcher), [[torch.randn(8)]], QUICK,
                           lambda *_: None)
    assert run.launches == {}
    assert all(hooked for _, hooked in launcher.seen)  # no unhooked given: as it was


def test_the_switch_takes_its_hook_off_tritons_launch_path_and_puts_it_back():
    from triton.runtime import jit

    switch = guards.KernelSwitch()
    hooked = jit.JITFunction.run
    assert switch._runs[jit.JITFunction][1] is hooked
    with switch.unhooked():
        assert jit.JITFunction.run is switch._runs[jit.JITFunction][0]
        assert jit.JITFunction.run is not hooked
    assert jit.JITFunction.run is hooked
