"""A run that judges the backward ranks by the training step: the live search's fitness,
the run store's speedup columns and every replay of them agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelevo.evaluate.verdict import TimingStats, Verdict, verdict_for
from kernelevo.search.archive import Archive, fitness, fitness_high
from kernelevo.store.run_store import RunStore
from test_store_briefs import add


def _stats(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, iqr_ms=0.0, min_ms=ms, samples=10, method="call_loop")


def trained(forward_ms: float, train_ms: float | None) -> Verdict:
    """A passing verdict under call time against an eager of 1 ms a forward and 3 ms a
    training step; `train_ms` None: a forward-only task."""
    measures = {"call": {"eager": _stats(1.0), "candidate": _stats(forward_ms)}}
    ranges = {"call": {"eager": [0.95 / forward_ms, 1.05 / forward_ms]}}
    if train_ms is not None:
        measures["train_call"] = {"eager": _stats(3.0), "candidate": _stats(train_ms)}
        ranges["train_call"] = {"eager": [2.9 / train_ms, 3.1 / train_ms]}
    return verdict_for("passed", timings=measures["call"], measures=measures,
                       timing_measure="call", speedup_ranges=ranges,
                       speedup_vs_eager=1.0 / forward_ms)


def test_the_training_step_ranks_where_the_backward_was_timed():
    quick_forward = trained(0.5, 2.5)  # forward 2x, training step 1.2x
    quick_training = trained(0.8, 1.0)  # forward 1.25x, training step 3x
    assert quick_forward.ranked_measure == "train_call"
    assert quick_forward.speedup_vs_eager == pytest.approx(2.0)  # the forward's stays
    assert fitness(quick_forward) == pytest.approx(1.2)
    assert fitness(quick_training) == pytest.approx(3.0)
    assert fitness_high(quick_training) == pytest.approx(3.1)
    assert quick_training.ranked_speedup("compile") is None  # no compile timed here


def test_a_forward_only_verdict_ranks_by_its_own_measure():
    forward = trained(0.5, None)
    assert forward.ranked_measure == "call"
    assert fitness(forward) == pytest.approx(2.0)
    assert fitness_high(forward) == forward.speedup_vs_eager_high == pytest.approx(2.1)


def test_the_store_keeps_the_ranked_speedups_and_a_replay_ranks_as_the_live_search(
        tmp_path: Path) -> None:
    verdicts = [trained(0.5, 2.5), trained(0.8, 1.0)]
    with RunStore.create(tmp_path, "layernorm", "# task", {}) as store:
        ids = [add(store, f"k{index}") for index in range(len(verdicts))]
        for candidate_id, verdict in zip(ids, verdicts):
            store.record_verdict(candidate_id, verdict)
        judged = store.briefs.judged_in_order()
        assert [j.speedup_vs_eager for j in judged] == [pytest.approx(fitness(v))
                                                        for v in verdicts]
        assert [j.speedup_vs_eager_high for j in judged] == [pytest.approx(fitness_high(v))
                                                             for v in verdicts]
        # the verdict itself keeps the forward's speedups
        assert store.candidate(ids[0]).verdict.speedup_vs_eager == pytest.approx(2.0)
        live = Archive(num_islands=1)
        for candidate_id, verdict in zip(ids, verdicts):
            live.add(candidate_id, ("triton", "1", False), fitness(verdict), 0,
                     fitness_high(verdict))
        replayed = Archive.replay(judged, num_islands=1)
        assert live.best().candidate_id == replayed.best().candidate_id == ids[1]
