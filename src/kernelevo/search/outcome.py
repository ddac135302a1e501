"""How a run ended, and the snapshot of a running one that views show."""

from __future__ import annotations

from dataclasses import dataclass, field

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
