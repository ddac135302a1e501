"""A per-candidate time budget for Triton's autotuner, inside the judging worker.

`@triton.autotune` benchmarks every config on a kernel's first call with a
new key. A candidate with dozens of configs (or a slow one per config) can
spend minutes there before its first output is checked. Once a candidate
has spent its budget, the configs not yet measured are skipped (timed as
infinitely slow, as Triton itself scores a config that fails to compile),
so the autotuner picks the best of those it did measure and the candidate
runs on. The verdict says so (`outcome.autotune_note`). A config being
measured when the budget runs out finishes: the budget is checked between
configs.

This is a limit on time, not a wall: the job's wall-clock limit still ends a
candidate whose single config never returns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

SKIPPED = [float("inf"), float("inf"), float("inf")]  # (median, 20th, 80th percentile)


@dataclass
class AutotuneSpend:
    """One candidate's autotuning: seconds spent, configs measured and skipped."""

    spent_s: float = 0.0
    measured: int = 0
    skipped: int = 0


class AutotuneBudget:
    """Counts the seconds Triton's autotuner benchmarks, and skips configs past a budget."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.spends: dict[int, AutotuneSpend] = {}
        self.spend = AutotuneSpend()  # the account being charged now
        self._installed = False

    def install(self) -> bool:
        """Wrap Autotuner._bench once; False where Triton is not importable."""
        if self._installed:
            return True
        try:
            from triton.runtime.autotuner import Autotuner
        except Exception:  # no Triton here: nothing autotunes
            return False
        original = Autotuner._bench
        budget = self

        def _bench(tuner: Any, *args: Any, config: Any, **meta: Any) -> Any:
            if budget.spend.spent_s >= budget.budget_s:
                budget.spend.skipped += 1
                return list(SKIPPED)
            started = time.perf_counter()
            try:
                return original(tuner, *args, config=config, **meta)
            finally:
                budget.spend.spent_s += time.perf_counter() - started
                budget.spend.measured += 1

        _bench.__wrapped__ = original  # type: ignore[attr-defined]
        Autotuner._bench = _bench
        self._installed = True
        return True

    def charge_to(self, candidate: int) -> None:
        """Autotuning from now on is this candidate's (a job's candidates take turns)."""
        self.spend = self.spends.setdefault(candidate, AutotuneSpend())

    def report(self, candidate: int) -> dict[str, float | int]:
        """The fields CheckedCandidate carries for one candidate."""
        spend = self.spends.get(candidate, AutotuneSpend())
        return {"autotune_s": round(spend.spent_s, 4), "autotune_measured": spend.measured,
                "autotune_skipped": spend.skipped}
