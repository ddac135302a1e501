"""How a run ended (and why, in words: a kernel at its roofline, an LLM that never answered,
no parent to build on), and the snapshot of a running one that views show."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kernelevo.evaluate.verdict import Verdict

# How a run ended; the command line exits non-zero for the last two.
OUTCOME_STATUSES = ("finished", "budget_spent", "llm_failed", "error")


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended (one of OUTCOME_STATUSES) and why, in words."""

    status: str
    reason: str

    def __post_init__(self) -> None:
        if self.status not in OUTCOME_STATUSES:
            raise ValueError(f"outcome status {self.status!r}: use one of {OUTCOME_STATUSES}")

    @property
    def failed(self) -> bool:
        """Whether the run could not do what it was asked (exit non-zero)."""
        return self.status in ("llm_failed", "error")


def roofline_reached(verdict: Verdict, threshold: float) -> str:
    """Why the search can stop at this kernel ('' when it cannot, or threshold is 0)."""
    roofline = verdict.profile.roofline if verdict.profile is not None else None
    if threshold <= 0 or not verdict.passed_kernel or roofline is None:
        return ""
    fraction = round(roofline.fraction, 4)  # as elite events record it (profile_descriptor)
    if fraction < threshold:
        return ""
    return (f"roofline reached: a kernel runs at {fraction * 100:.0f} % of its "
            f"{roofline.bound} ceiling (stop at {threshold * 100:.0f} %)")


def never_answered(outcome: RunOutcome, searching: bool, answers: int, failures: int,
                   last_error: str) -> RunOutcome:
    """`outcome`, unless every LLM call failed: then the run failed, whatever else it did.

    Seeds and tuner variants may have spent the candidate budget or reached
    the roofline; a run meant to search with an LLM (`searching`) that never
    answered still did not do what it was asked.
    """
    if outcome.status == "error" or not searching or not failures or answers:
        return outcome
    return RunOutcome("llm_failed", f"the LLM never answered: {failures} calls failed, the "
                      f"last with: {last_error}")


def no_parent_reason(candidates: Iterable[Any], why_stop: str) -> str:
    """Why a run with every candidate judged and none passing stops, and what to do."""
    judged = [c for c in candidates if c.verdict is not None]
    first = judged[0] if judged else None
    why = (f"; {first.id} ({first.candidate.origin}) was {first.verdict.status} "
           f"({first.verdict.reason}): {gist(first.verdict.message)}"
           if first is not None else "")
    return (f"no candidate passed, {why_stop}: all {len(judged)} judged failed{why}; check the "
            "task and a starting kernel with `kernelevo eval TASK FILE`, then give a working "
            "one with --seed")


def gist(message: str) -> str:
    """A message on one line: a traceback's first and last lines (what raised, and why)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    text = lines[0] + (f" ... {lines[-1]}" if len(lines) > 1 else "") if lines else ""
    return text[:600]


@dataclass
class Progress:
    """A snapshot for the live display."""

    best_vs_eager: float | None = None
    best_vs_compile: float | None = None
    best_id: str | None = None
    by_status: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    estimated_tokens: int = 0  # of `tokens`, not as the server reported them (charges.py)
    cost_usd: float = 0.0
    elapsed_s: float = 0.0
    gpu_busy_share: float = 0.0
    queued: int = 0
    llm_in_flight: int = 0
    message: str = ""
    outcome: RunOutcome | None = None  # set once the run has ended
    # Candidates by where they came from (seed, tuner, llm, repair), once the run has ended.
    by_origin: dict[str, int] = field(default_factory=dict)

    def origins_text(self) -> str:
        """What the candidate count includes, e.g. '12: 2 seeds, 7 tuner, 3 LLM'."""
        counts = self.by_origin
        if not counts:
            return ""
        llm = counts.get("llm", 0) + counts.get("repair", 0)
        parts = [(counts.get("seed", 0) + counts.get("user", 0), "seeds"),
                 (counts.get("tuner", 0), "tuner"), (llm, "LLM")]
        shown = ", ".join(f"{count} {name}" for count, name in parts)
        return f"{sum(counts.values())}: {shown}"
