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
    cost_usd: float = 0.0
    elapsed_s: float = 0.0
    gpu_busy_share: float = 0.0
    queued: int = 0
    llm_in_flight: int = 0
    message: str = ""
    outcome: RunOutcome | None = None  # set once the run has ended
