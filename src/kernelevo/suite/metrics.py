"""A suite's summary figures: correct fraction, fast_p and the geometric-mean speedup.

Per task the best sample counts (the fastest custom kernel that passed). As in
KernelBench, fast_p is the fraction of *all* tasks whose kernel is correct and
more than p times faster than the baseline, so fast_0 is the correct fraction.
The geometric mean is over the correct tasks with a speedup, with a percentile
bootstrap confidence interval over tasks.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
BASELINES = ("eager", "compile")


@dataclass(frozen=True)
class TaskResult:
    """The best sample of one task."""

    key: str
    samples: int
    correct: bool
    reason: str  # the best sample's reason ("no_solution" when there was none)
    speedup: dict[str, float | None] = field(default_factory=dict)  # by baseline


@dataclass(frozen=True)
class Geomean:
    value: float | None
    low: float | None  # bounds of the 95 % bootstrap interval
    high: float | None
    tasks: int


@dataclass(frozen=True)
class SuiteSummary:
    tasks: int
    correct: int
    correct_fraction: float
    # fast_p[baseline][str(p)]: None where a correct task has no timing for it
    fast_p: dict[str, dict[str, float | None]]
    geomean: dict[str, Geomean]
    tokens: int = 0
    usd: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SuiteResult:
    """A finished suite: every row judged, the best per task, the summary, where it is."""

    rows: list[dict[str, Any]]
    tasks: list[TaskResult]
    summary: SuiteSummary
    out: Path
    gpu: str | None
    time_spent: dict[str, Any] | None = None  # where this run's time went (time_spent.py)


def best_of(key: str, rows: list[dict[str, Any]]) -> TaskResult:
    """The task's best sample: a passing custom kernel, the fastest against eager."""
    if not rows:
        return TaskResult(key, 0, False, "no_solution")
    passing = [r for r in rows if r.get("passed_kernel")]
    if not passing:
        return TaskResult(key, len(rows), False, rows[0].get("reason", "unknown"))
    best = max(passing, key=lambda r: r.get("speedup", {}).get("eager") or 0.0)
    return TaskResult(key, len(rows), True, best["reason"], dict(best.get("speedup", {})))


def fast_p(results: list[TaskResult], baseline: str, p: float) -> float | None:
    if not results:
        return None
    hits = 0
    for result in results:
        if not result.correct:
            continue
        if p == 0.0:
            hits += 1
            continue
        gain = result.speedup.get(baseline)
        if gain is None:
            return None  # untimed: the fraction is unknown, not zero
        hits += gain > p
    return hits / len(results)


def geomean(values: list[float], draws: int = 2000, seed: int = 0) -> Geomean:
    """Geometric mean and its 95 % percentile-bootstrap interval (seeded: reproducible)."""
    logs = [math.log(v) for v in values if v and v > 0]
    if not logs:
        return Geomean(None, None, None, 0)
    centre = math.exp(sum(logs) / len(logs))
    if len(logs) == 1:
        return Geomean(centre, None, None, 1)
    rng = random.Random(seed)
    means = sorted(sum(rng.choice(logs) for _ in logs) / len(logs) for _ in range(draws))
    low, high = means[int(0.025 * draws)], means[min(draws - 1, int(0.975 * draws))]
    return Geomean(centre, math.exp(low), math.exp(high), len(logs))


def summarize(results: Iterable[TaskResult], tokens: int = 0, usd: float = 0.0) -> SuiteSummary:
    results = list(results)
    correct = sum(r.correct for r in results)
    table = {b: {f"{p:g}": fast_p(results, b, p) for p in FAST_P} for b in BASELINES}
    means = {b: geomean([s for r in results
                         if r.correct and (s := r.speedup.get(b)) is not None]) for b in BASELINES}
    return SuiteSummary(len(results), correct, correct / len(results) if results else 0.0,
                        table, means, tokens, usd)
