"""The gpu measure stops once every contestant's median is known well enough.

Each gpu sample holds the GPU alone; in a suite on an H100 the timing was half
the wall time (bench/RESULTS.md). A steady kernel's median is known within 1 %
long before 200 samples; a noisy one is sampled to the end. The sampler is a
stand-in that hands out chosen times, so the rule runs unchanged on the CPU.
"""

import itertools

import pytest
import torch

from kernelevo.config import TimingConfig
from kernelevo.errors import ConfigError
from kernelevo.evaluate.child import timing
from kernelevo.evaluate.child.timing import precise, time_contestants


class _Chosen:
    times: dict[str, list[float]] = {}

    def __init__(self, arena, sets, load=None) -> None:
        self.shares: dict[str, int] = {}
        self.retaken = self.late = 0
        self.cycles = {name: itertools.cycle(times) for name, times in self.times.items()}

    def sample(self, call, set_index, hold_ms):
        name = call()
        return next(self.cycles[name]), 0.0, name

    def loop(self, call, set_index, calls):
        return 0.05, call()


def _gpu(monkeypatch, times, sets=3, **settings):
    monkeypatch.setattr(timing, "HostSampler", _Chosen)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _Chosen.times = times
    contestants = {name: (lambda *_, name=name: name) for name in times}
    config = TimingConfig(warmup_ms=1.0, call_loop_ms=0.5, call_target_ms=2.0, **settings)
    seen = []
    run = time_contestants(contestants, [[torch.ones(2)] for _ in range(sets)], config,
                           lambda name, measure, index, output: seen.append((measure, index)))
    return run.measures["gpu"], {index for measure, index in seen if measure == "gpu"}


def test_steady_contestants_stop_after_the_fewest_samples(monkeypatch):
    steady = {"eager": [1.000, 1.002, 0.998, 1.001], "candidate_0": [0.500, 0.501, 0.499]}
    gpu, sets = _gpu(monkeypatch, steady)
    assert gpu["eager"].samples == gpu["candidate_0"].samples == 20
    assert sets == {0, 1, 2}  # every input set was timed, and its outputs seen


def test_a_noisy_contestant_is_sampled_to_the_end(monkeypatch):
    noisy = {"eager": [1.0, 1.0, 1.0, 1.0], "candidate_0": [0.5, 0.9, 0.3, 1.4, 0.6]}
    gpu, _ = _gpu(monkeypatch, noisy)
    assert gpu["candidate_0"].samples == 200


def test_precision_zero_takes_every_sample_asked(monkeypatch):
    steady = {"eager": [1.0, 1.001], "candidate_0": [0.5, 0.501]}
    gpu, _ = _gpu(monkeypatch, steady, gpu_precision=0.0)
    assert gpu["eager"].samples == 200


def test_the_notch_rule():
    assert precise([[1.0] * 4], 0.01)
    assert not precise([[1.0] * 3], 0.01)  # too few to say
    assert not precise([], 0.01)
    # quartiles 0.925 and 1.075 over 16 samples: notch 1.57 * 0.15 / 4 = 5.9 % of 1
    spread = [0.9] * 4 + [1.0] * 8 + [1.1] * 4
    assert precise([spread], 0.06) and not precise([spread], 0.05)
    assert not precise([[1.0] * 4, spread], 0.05)  # every one must be
    with pytest.raises(ConfigError, match="gpu_precision"):
        TimingConfig(gpu_precision=0.9)
