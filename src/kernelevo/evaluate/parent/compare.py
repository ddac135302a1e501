"""Two candidates under one protocol: each checked alone, then timed interleaved together."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.protocol import JudgeLike
from kernelevo.evaluate.verdict import Verdict
from kernelevo.task import Task


@dataclass(frozen=True)
class ComparisonResult:
    """Both verdicts and, when both passed with timings, which is faster and by how much."""

    a: Verdict
    b: Verdict
    faster: str | None = None  # "a", "b" or None
    ratio: float | None = None  # slower median / faster median
    noise: float | None = None  # relative half-IQR of the two, added
    significant: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_candidates(task: Task, a: Candidate, b: Candidate, config: EvalConfig,
                       progress: Callable[[str], None] | None = None,
                       judge: JudgeLike | None = None) -> ComparisonResult:
    """Judge a and b alone (so one's crash cannot sink the other), then time both together.

    `judge` judges `task` under `config` (a service's, say); default: one in this process.
    """
    if judge is None:
        from kernelevo.evaluate.parent.judge import Judge

        judge = Judge(task, config, progress)
    first = judge.evaluate_many([a], timed=False)[0]
    second = judge.evaluate_many([b], timed=False)[0]
    if not (first.ok and second.ok):
        return ComparisonResult(first, second)
    first, second = judge.evaluate_many([a, b])
    if not (first.ok and second.ok) or first.speedup_vs_eager is None:
        return ComparisonResult(first, second)
    return _decide(first, second)


def _decide(a: Verdict, b: Verdict) -> ComparisonResult:
    """Which is faster, and whether by more than a rerun can move either.

    Both were timed in one process, interleaved, against the same eager
    baseline: their speedup intervals over it (what a rerun can show) must
    not overlap for the difference to count; inside them it is a tie.
    """
    time_a, time_b = a.timings["candidate"], b.timings["candidate"]
    faster = "a" if time_a.median_ms <= time_b.median_ms else "b"
    fast, slow = sorted((time_a.median_ms, time_b.median_ms))
    ratio = slow / fast
    range_a = a.speedup_ranges.get(a.timing_measure, {}).get("eager")
    range_b = b.speedup_ranges.get(b.timing_measure, {}).get("eager")
    if range_a and range_b:
        # the relative width of the two intervals, either side: a difference must clear it
        noise = (range_a[1] / range_a[0] + range_b[1] / range_b[0]) / 2 - 1
        separate = range_a[0] > range_b[1] or range_b[0] > range_a[1]
        return ComparisonResult(a, b, faster, ratio, noise, separate)
    noise = time_a.iqr_ms / (2 * time_a.median_ms) + time_b.iqr_ms / (2 * time_b.median_ms)
    return ComparisonResult(a, b, faster, ratio, noise, ratio - 1 > noise)
