"""Timing of a training step and of the backward alone (timing_backward.py), on the CPU.

The loops are timing.py's own, by the host's clock where there is no GPU
(verdicts report no numbers there; these tests read the stats directly).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from kernelevo.config import TimingConfig
from kernelevo.evaluate.child.baselines import CompiledInAModel, InAModel
from kernelevo.evaluate.child.timing import TimingRun, speedup_range, summarize
from kernelevo.evaluate.child.timing_backward import DIFFERENCE_METHOD, _difference, time_backward
from kernelevo.evaluate.shared import inputs as task_inputs
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "layernorm_backward"
FIXTURE_TASK = ROOT / "tests" / "fixtures" / "tasks" / "layernorm_backward.py"
# As few samples as the loops take: the interpreter's calls are slow.
QUICK = TimingConfig(warmup_ms=1.0, target_ms=1.0, min_samples=4, max_samples=4,
                     call_loop_ms=1.0, call_target_ms=1.0)


def _module(path: Path, name: str, tmp_path: Path):
    return task_inputs.import_source(path.read_text(), name, tmp_path)


def _sets(task, seeds):
    return [task_inputs.make_inputs(task, seed, "cpu", torch.float32) for seed in seeds]


def test_the_example_gets_train_and_backward_measures_for_candidate_eager_and_compile(tmp_path):
    task = _module(FIXTURE_TASK, "bwd_timing_task", tmp_path)
    candidate = _module(EXAMPLE / "triton_candidate.py", "bwd_timing_candidate", tmp_path)
    init = list(task.get_init_inputs())
    eager = task_inputs.build_model(task.Model, init, "cpu", torch.float32)
    own = task_inputs.build_model(candidate.ModelNew, init, "cpu", torch.float32)
    extra = _sets(task, [101])
    compiled = CompiledInAModel(torch.compile(InAModel(eager)), extra)
    seeds = [11, 12, 13]
    timing = time_backward({"eager": eager, "compile": compiled, "candidate_0": own},
                           _sets(task, seeds), seeds, QUICK, counted=[0, 1])
    assert timing.dropped == {}, timing.dropped
    for measure in ("train_gpu", "train_call", "backward_gpu", "backward_call"):
        stats = timing.measures[measure]
        expected = {"eager", "compile", "candidate_0"}
        if measure.startswith("backward") and "compile" not in stats:
            # compile's backward is train minus forward: on a busy machine those two calls'
            # noise can hide it, and then it is left out with a note, never read as zero
            assert any(note.startswith(f"backward: compile: train minus forward with grad was "
                                       f"not above zero") and measure.split("_")[1] in note
                       for note in timing.notes), timing.notes
            expected.discard("compile")
        assert set(stats) == expected, measure
        for name, values in stats.items():
            assert values["median_ms"] > 0 and values["samples"] >= 4, (measure, name)
        # paired rounds for the speedup's interval, on the counted sets only
        assert len(timing.rounds[measure]["candidate_0"]) >= 4
    # eager's graph and the candidate's custom Function replay their backward; AOTAutograd's
    # compiled backward donates its buffers and refuses to, so it is train minus forward
    assert timing.methods == {"eager": "replayed graph", "compile": DIFFERENCE_METHOD,
                              "candidate_0": "replayed graph"}
    assert all(stats["compile"]["method"] == DIFFERENCE_METHOD
               for measure, stats in timing.measures.items()
               if measure.startswith("backward") and "compile" in stats)
    assert any(note.startswith("compile: its graph refuses a second backward")
               and "donated buffers" in note for note in timing.notes)


SLEEP_S = 0.03


class _Slow(torch.autograd.Function):
    """A forward that sleeps; a backward that does not, or sleeps `backward_s`."""

    @staticmethod
    def forward(ctx, x, backward_s, once):
        time.sleep(SLEEP_S)
        ctx.backward_s, ctx.once, ctx.done = backward_s, once, False
        return x * 2.0

    @staticmethod
    def backward(ctx, grad):
        if ctx.once and ctx.done:  # as a graph whose buffers went with its first backward
            raise RuntimeError("the buffers of this graph were freed")
        ctx.done = True
        time.sleep(ctx.backward_s)
        return grad * 2.0, None, None


class _SlowModel(torch.nn.Module):
    def __init__(self, backward_s: float = 0.0, once: bool = False) -> None:
        super().__init__()
        self.backward_s, self.once = backward_s, once

    def forward(self, x):
        return _Slow.apply(x, self.backward_s, self.once)


def _plain_sets(count: int = 2):
    return [[torch.randn(8, 8, generator=torch.Generator().manual_seed(i))] for i in range(count)]


def test_the_backward_alone_leaves_the_forward_out():
    timing = time_backward({"candidate_0": _SlowModel()}, _plain_sets(), [1, 2], QUICK)
    assert timing.methods == {"candidate_0": "replayed graph"}
    for measure in ("gpu", "call"):
        train = timing.measures[f"train_{measure}"]["candidate_0"]["median_ms"]
        backward = timing.measures[f"backward_{measure}"]["candidate_0"]["median_ms"]
        assert train >= SLEEP_S * 1e3, measure  # the sleeping forward is in a training step
        assert backward < SLEEP_S * 1e3 / 3, measure  # and not in the backward alone


def test_a_graph_that_refuses_a_replay_is_timed_as_train_minus_forward():
    backward_s = 0.015
    timing = time_backward({"candidate_0": _SlowModel(backward_s, once=True)}, _plain_sets(),
                           [1, 2], QUICK)
    assert timing.methods == {"candidate_0": DIFFERENCE_METHOD}
    assert any("refuses a second backward" in note and "freed" in note for note in timing.notes)
    for measure in ("gpu", "call"):
        stats = timing.measures[f"backward_{measure}"]["candidate_0"]
        assert stats["method"] == DIFFERENCE_METHOD
        # the backward's own sleep, not the forward's: within the host's noise of 15 ms
        assert backward_s * 1e3 * 0.8 < stats["median_ms"] < SLEEP_S * 1e3, measure
        assert set(timing.measures[f"backward_{measure}"]) == {"candidate_0"}


class _Stale(torch.autograd.Function):
    """Right gradients on a graph's first backward, zeros on every replay."""

    @staticmethod
    def forward(ctx, x):
        ctx.calls = 0
        return x * 3.0

    @staticmethod
    def backward(ctx, grad):
        ctx.calls += 1
        return grad * 3.0 if ctx.calls == 1 else torch.zeros_like(grad)


class _StaleModel(torch.nn.Module):
    def forward(self, x):
        return _Stale.apply(x)


def test_a_candidate_whose_timed_gradients_change_is_dropped():
    timing = time_backward({"candidate_0": _StaleModel(), "eager": _SlowModel()},
                           _plain_sets(), [1, 2], QUICK)
    assert "backward" in timing.dropped["candidate_0"]
    assert "gradient 0 during timing" in timing.dropped["candidate_0"]
    assert "candidate_0" not in timing.measures["backward_gpu"]
    assert "eager" in timing.measures["backward_gpu"]
    assert "candidate_0" in timing.measures["train_gpu"]  # its training steps were right


class _NoGraph(torch.nn.Module):
    def forward(self, x):
        return x.detach() * 2.0


def test_a_baseline_that_cannot_train_is_left_out_with_a_note():
    timing = time_backward({"eager": _NoGraph(), "candidate_0": _SlowModel()}, _plain_sets(),
                           [1, 2], QUICK)
    assert set(timing.measures["train_call"]) == {"candidate_0"}
    assert any(note.startswith("eager: not timed in training") for note in timing.notes)
    assert timing.dropped == {}
    alone = time_backward({"eager": _NoGraph()}, _plain_sets(), [1, 2], QUICK)
    assert alone.measures == {} and alone.notes


def test_the_workers_step_gives_speedup_intervals_from_paired_rounds():
    from kernelevo.evaluate.shared.replies import ReadyReply
    from kernelevo.evaluate.child.timing import TimingRun
    from kernelevo.evaluate.child.worker_timing import _backward_timing, speedup_ranges

    given = ReadyReply(seeds=(1, 2, 3), variants=(None, None, 64.0), tolerances=((1e-4, 1e-4),))
    run = TimingRun(dropped={"candidate_1": "wrong while timing its forward"})
    contestants = {"eager": _SlowModel(0.004), "candidate_0": _SlowModel(),
                   "candidate_1": _SlowModel()}
    trained = _backward_timing(contestants, run, _plain_sets(3), given, QUICK, [0, 1], None,
                               given.tolerances)
    assert "candidate_1" not in trained.measures["train_gpu"]  # its forward's timing ended it
    ranges = speedup_ranges(trained.measures, trained.rounds)
    for measure in ("train_gpu", "train_call", "backward_gpu", "backward_call"):
        low, high = ranges["0"][measure]["eager"]
        assert low <= high
    # eager's backward sleeps 4 ms, the candidate's not at all: the whole interval is above 1
    assert ranges["0"]["backward_gpu"]["eager"][0] > 1.0


def _differenced(train: list[float], forward: list[float]):
    """A timing run of one contestant timed as train and forward with grad, differenced."""
    rounds = {"call": {"candidate_0": dict(enumerate(train)),
                       "candidate_0/forward": dict(enumerate(forward))}}
    run = TimingRun(measures={"call": {"candidate_0": summarize(train, "loop"),
                                       "candidate_0/forward": summarize(forward, "loop")}},
                    rounds=rounds)
    _difference(run, "candidate_0")
    return run


def test_a_backward_lost_in_the_noise_is_left_out_and_said_not_read_as_zero():
    # train minus forward above zero in 2 of 6 rounds: the old median was 0.0 ms
    run = _differenced([1.0, 1.1, 0.9, 1.0, 1.2, 1.0], [1.05, 1.0, 1.0, 1.1, 1.0, 1.02])
    assert "candidate_0" not in run.measures["call"]
    assert "candidate_0/forward" not in run.measures["call"]
    assert run.rounds["call"] == {}
    assert any("not above zero in 4 of 6 rounds of call time" in note for note in run.notes)


def test_a_few_rounds_within_the_noise_widen_the_interval_without_a_zero():
    train = [2.0, 2.1, 1.9, 2.0, 0.95, 2.05]
    run = _differenced(train, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    rounds = run.rounds["call"]["candidate_0"]
    assert min(rounds.values()) == pytest.approx(0.9)  # the round below zero: the least above
    stats = run.measures["call"]["candidate_0"]
    assert stats.method == DIFFERENCE_METHOD and stats.median_ms == pytest.approx(1.0)
    assert not run.notes
    eager = {r: 3.0 for r in rounds}
    # every round's speedup is finite: none divides by a zero backward
    low, high = speedup_range(summarize(list(eager.values()), "loop"), stats, eager, rounds)
    assert 0 < low < 3.0 < high < float("inf")
