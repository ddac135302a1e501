"""Which candidate rows a page shows: all of a small run, a bounded choice of a large one.

One HTML row per candidate made a 50,000-candidate report 57 MB and 43 s to
first paint; past `ROW_LIMIT` rows the page shows the fastest and the newest
halves and says where the rest are. The choice reads only a candidate's id,
status and speedup, so a run's briefs are chosen from and only the rows
shown are built (with their LLM spend) in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

ROW_LIMIT = 200


@dataclass(frozen=True)
class CandidateRow:
    """One candidate as a table row; times in seconds since the run began."""

    id: str
    name: str
    origin: str
    backend: str
    parent_id: str | None
    island: int | None
    status: str
    reason: str
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    runtime_ms: float | None
    created_s: float
    evaluated_s: float | None
    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class RowGroup:
    """Rows under one caption; the caption is empty when the table shows every row."""

    caption: str
    rows: tuple[CandidateRow, ...]


@dataclass(frozen=True)
class CandidateTable:
    groups: tuple[RowGroup, ...]
    note: str  # why rows are missing and where to find them; "" when none are


class Choosable(Protocol):
    """What the choice reads of a candidate (a CandidateRow or a store's brief)."""

    @property
    def id(self) -> str: ...

    @property
    def status(self) -> str | None: ...

    @property
    def speedup_vs_eager(self) -> float | None: ...


Row = TypeVar("Row", bound=Choosable)


def choose_rows(rows: Sequence[Row],
                limit: int = ROW_LIMIT) -> tuple[list[tuple[str, list[Row]]], str]:
    """(caption, rows) groups and a note: every row newest first, or the fastest then newest."""
    if len(rows) <= limit:
        return [("", list(reversed(rows)))], ""
    timed = [row for row in rows if row.status == "ok" and row.speedup_vs_eager is not None]
    fastest = sorted(timed, key=lambda row: -(row.speedup_vs_eager or 0.0))[: limit // 2]
    chosen = {row.id for row in fastest}
    newest = [row for row in reversed(rows) if row.id not in chosen][: limit - len(fastest)]
    note = (f"showing {len(fastest) + len(newest):,} of {len(rows):,} candidates; every one is "
            "in the run's run.db (`kernelevo show`, `kernelevo export`)")
    groups = [(f"the {len(fastest):,} fastest", fastest),
              (f"the {len(newest):,} newest of the others", newest)]
    return [(caption, group) for caption, group in groups if group], note


def candidate_table(rows: Sequence[CandidateRow], limit: int = ROW_LIMIT) -> CandidateTable:
    """Every row newest first, or at most `limit`: the fastest half, then the newest."""
    groups, note = choose_rows(rows, limit)
    return CandidateTable(tuple(RowGroup(caption, tuple(chosen)) for caption, chosen in groups),
                          note)
