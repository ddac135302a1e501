"""The judge's typed seams: every judge is a JudgeLike returning Verdicts; the judge's own config decides."""

import typing
from types import SimpleNamespace

from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.evaluate.parent import outcome
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.evaluate.protocol import JudgeLike
from kernelevo.evaluate.remote.client import ServiceJudge
from kernelevo.evaluate.remote.cluster import ClusterJudge
from kernelevo.evaluate.shared.messages import Timing
from kernelevo.evaluate.verdict import Verdict, verdict_for
from kernelevo.search.loop import Evolution


def test_every_judge_kind_answers_with_verdicts():
    for kind in (Judge, ServiceJudge, ClusterJudge):
        hints = typing.get_type_hints(kind.evaluate)
        assert hints["return"] is Verdict, kind
        assert typing.get_type_hints(kind.evaluate_many)["return"] == list[Verdict], kind
        for name in ("evaluate", "evaluate_many", "prebuild"):
            assert callable(getattr(kind, name)), (kind, name)


def test_the_search_takes_judge_likes():
    # The proposer's type is imported for type checkers only: any class stands in.
    hints = typing.get_type_hints(Evolution.__init__, localns={"LLMProposer": object})
    assert hints["judges"] == list[JudgeLike]


def _stats(median_ms: float) -> dict:
    return {"median_ms": median_ms, "iqr_ms": 0.0, "min_ms": median_ms, "samples": 10,
            "method": "events", "mean_ms": median_ms}


def _timed_under(measure: str) -> Verdict:
    timing = Timing(measures={
        "gpu": {"candidate_0": _stats(1.0), "eager": _stats(4.0)},
        "call": {"candidate_0": _stats(2.0), "eager": _stats(3.0)},
    })
    judge = SimpleNamespace(config=EvalConfig(timing=TimingConfig(measure=measure)))
    state = SimpleNamespace(timing=timing, reference=SimpleNamespace(bytes_moved=0, flops=0,
                                                                    peak_bytes=0))
    return outcome._timed(verdict_for("passed"), state, judge, 0,
                          SimpleNamespace(backend="triton"))


def test_speedups_use_the_measure_of_the_judges_own_config():
    by_gpu, by_call = _timed_under("gpu"), _timed_under("call")
    assert (by_gpu.timing_measure, by_gpu.speedup_vs_eager) == ("gpu", 4.0)
    assert (by_call.timing_measure, by_call.speedup_vs_eager) == ("call", 1.5)
    assert by_gpu.measures == by_call.measures  # the same report, decided two ways
