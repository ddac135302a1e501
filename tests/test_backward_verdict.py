"""A timed verdict of a task whose backward is judged: train and backward measures, shown."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from rich.console import Console

from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.evaluate.parent import outcome
from kernelevo.evaluate.shared.messages import Timing
from kernelevo.evaluate.verdict import Verdict, verdict_for
from kernelevo.render import print_verdict


def _stats(median_ms: float, method: str = "events") -> dict:
    return {"median_ms": median_ms, "iqr_ms": 0.0, "min_ms": median_ms, "samples": 10,
            "method": method, "mean_ms": median_ms}


def _verdict(measure: str = "call") -> Verdict:
    timing = Timing(
        measures={
            "gpu": {"candidate_0": _stats(1.0), "eager": _stats(2.0), "compile": _stats(1.5)},
            "call": {"candidate_0": _stats(1.0), "eager": _stats(2.0), "compile": _stats(1.5)},
            "train_gpu": {"candidate_0": _stats(4.0), "eager": _stats(6.0)},
            "train_call": {"candidate_0": _stats(4.0), "eager": _stats(10.0),
                           "compile": _stats(5.0)},
            "backward_call": {"candidate_0": _stats(3.0), "eager": _stats(6.0),
                              "compile": _stats(2.4, "train-forward")},
            # another candidate's measure of the same job: not this verdict's
            "backward_gpu": {"candidate_1": _stats(1.0), "eager": _stats(3.0)},
        },
        ranges={"0": {"call": {"eager": [1.9, 2.1]}, "train_call": {"eager": [2.3, 2.7],
                                                                    "compile": [1.2, 1.3]}}},
        backward_methods={"candidate_0": "replayed graph", "candidate_1": "replayed graph",
                          "eager": "replayed graph", "compile": "train-forward"})
    judge = SimpleNamespace(config=EvalConfig(timing=TimingConfig(measure=measure)))
    state = SimpleNamespace(timing=timing, reference=SimpleNamespace(bytes_moved=0, flops=0,
                                                                    peak_bytes=0))
    return outcome._timed(verdict_for("passed"), state, judge, 0,
                          SimpleNamespace(backend="triton"))


def test_the_forwards_speedup_stays_and_training_has_its_own():
    verdict = _verdict()
    assert (verdict.speedup_vs_eager, verdict.speedup_vs_compile) == (2.0, 1.5)
    assert verdict.train_measure == "train_call"
    assert verdict.speedup_in("train_call", "eager") == 2.5
    assert verdict.speedup_in("train_call", "compile") == 1.25
    assert verdict.speedup_in("backward_call", "compile") == pytest.approx(0.8)
    assert verdict.speedup_ranges["train_call"]["eager"] == [2.3, 2.7]
    assert "backward_gpu" not in verdict.measures  # candidate_1's, not this one's
    assert Verdict("ok", "passed", timing_measure="kernelbench").train_measure == "train_gpu"


def test_a_verdict_says_how_each_backward_alone_was_timed():
    note = next(n for n in _verdict().notes if n.startswith("backward alone timed as"))
    assert "candidate: its backward replayed on one forward's graph" in note
    assert "compile: train minus forward with grad (its graph refuses a replay)" in note
    assert "candidate_1" not in note
    measures_line = next(n for n in _verdict().notes if n.startswith("speedups use"))
    assert "train call time 2.50x" in measures_line and "backward call time 2.00x" in measures_line


def test_the_verdict_shows_training_speedups_and_tables():
    console = Console(record=True, width=160)
    print_verdict(console, "candidate.py", _verdict())
    text = console.export_text()
    assert "train call time (forward and backward)" in text
    assert "backward call time (the backward alone)" in text
    assert "2.50x (2.30-2.70x)" in text  # the train table's speedup over eager, with its range
    brief = Console(record=True, width=160)
    print_verdict(brief, "candidate.py", _verdict(), brief=True)
    lines = brief.export_text().splitlines()
    assert "speedup: 2.00x vs eager (1.90-2.10x), 1.50x vs torch.compile (call time)" in lines
    assert ("train speedup: 2.50x vs eager (2.30-2.70x), 1.25x vs torch.compile (1.20-1.30x) "
            "(train call time (forward and backward))") in lines
    assert ("backward speedup: 2.00x vs eager, 0.80x vs torch.compile "
            "(backward call time (the backward alone))") in lines


def test_a_verdict_round_trips_with_its_training_measures():
    verdict = _verdict()
    again = Verdict.from_dict(verdict.to_dict())
    assert again.measures == verdict.measures
    assert again.speedup_in("train_call", "eager") == 2.5


def test_the_models_feedback_names_the_training_steps_times():
    from kernelevo.propose.prompt import feedback

    text = feedback(_verdict()).splitlines()
    train = next(line for line in text if line.startswith("training step"))
    assert train.startswith("training step (forward with grad and backward): 4.0000 ms median")
    assert train.endswith("-> speedup 2.50x vs PyTorch eager, 1.25x vs torch.compile")
    backward = next(line for line in text if line.startswith("backward alone"))
    assert backward.endswith("-> speedup 2.00x vs PyTorch eager, 0.80x vs torch.compile")
    forward_only = replace(_verdict(), measures={m: s for m, s in _verdict().measures.items()
                                                 if m in ("gpu", "call")})
    assert not any(line.startswith(("training step", "backward alone"))
                   for line in feedback(forward_only).splitlines())


def test_a_timed_verdict_gives_what_the_oracle_and_the_worker_held_on_the_gpu():
    timing = Timing(measures={measure: {"candidate_0": _stats(1.0), "eager": _stats(2.0)}
                              for measure in ("gpu", "call")}, peak_bytes=3 << 30)
    judge = SimpleNamespace(config=EvalConfig())
    state = SimpleNamespace(timing=timing, reference=SimpleNamespace(
        bytes_moved=0, flops=0, peak_bytes=5 << 30))
    verdict = outcome._timed(verdict_for("passed"), state, judge, 0,
                             SimpleNamespace(backend="triton"))
    assert verdict.gpu_peak_bytes == {"oracle": 5 << 30, "worker": 3 << 30}
    assert Verdict.from_dict(verdict.to_dict()).gpu_peak_bytes == verdict.gpu_peak_bytes
    assert Timing.from_json(timing.to_json()).peak_bytes == 3 << 30  # it crosses the pipe
    # on the CPU neither process has a GPU peak: nothing is said
    cpu = outcome._timed(verdict_for("passed"), SimpleNamespace(
        timing=replace(timing, peak_bytes=0), reference=SimpleNamespace(
            bytes_moved=0, flops=0, peak_bytes=0)), judge, 0, SimpleNamespace(backend="triton"))
    assert cpu.gpu_peak_bytes == {}


def test_a_peak_that_cannot_be_read_is_zero_not_a_failure(monkeypatch):
    import torch

    from kernelevo.evaluate.shared import inputs

    def broken():  # as a candidate that replaced the allocator's API would leave it
        raise RuntimeError("no allocator here")

    monkeypatch.setattr(torch.cuda, "max_memory_reserved", broken)
    assert inputs.peak_gpu_bytes("cuda") == 0
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: "12")
    assert inputs.peak_gpu_bytes("cuda") == 12
    assert inputs.peak_gpu_bytes("cpu") == 0


def test_the_re_checks_peaks_sit_beside_the_evaluations_and_an_untimed_pass_gives_its_own():
    """A lane holds the re-check at other sizes beside the evaluation: its processes' peaks
    go into the row too (recheck_oracle, recheck_worker), so lanes can be sized by both."""
    from kernelevo.evaluate.parent.other_sizes import OtherSizes
    from kernelevo.evaluate.shared.messages import Checked

    assert Checked.from_json(Checked(7 << 30).to_json()).peak_bytes == 7 << 30
    evaluation = replace(verdict_for("passed"), gpu_peak_bytes={"oracle": 5 << 30,
                                                                "worker": 3 << 30})
    recheck = replace(verdict_for("passed"), gpu_peak_bytes={"oracle": 2 << 30,
                                                             "worker": 1 << 30})
    sizes = OtherSizes(SimpleNamespace(progress=lambda *_: None))
    sizes.varied = lambda: ("task at other sizes", "N=64")
    sizes._rechecked = lambda *args: [recheck]
    [verdict] = sizes.apply([SimpleNamespace()], [evaluation])
    assert verdict.ok and verdict.gpu_peak_bytes == {
        "oracle": 5 << 30, "worker": 3 << 30, "recheck_oracle": 2 << 30,
        "recheck_worker": 1 << 30}
    # an untimed pass (a re-check's) gives its worker's peak from the end of its checks
    assert outcome._peaks(2 << 30, 1 << 30) == {"oracle": 2 << 30, "worker": 1 << 30}
    assert outcome._peaks(0, 1 << 30) == {"worker": 1 << 30}
