"""Which candidate rows a page shows: all of a small run, a bounded choice of a large one.

One HTML row per candidate made a 50,000-candidate report 57 MB and 43 s to
first paint; past `ROW_LIMIT` rows the page shows the fastest and the newest
halves and says where the rest are. The choice reads only a candidate's id,
status and speedup, so a run's store picks the fastest and newest by index
(store_briefs) and only the rows shown are built, with their LLM spend.
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


def choose_rows(count: int, fastest: Sequence[Row], newest: Sequence[Row],
                limit: int = ROW_LIMIT) -> tuple[list[tuple[str, list[Row]]], str]:
    """(caption, rows) groups and a note: every row newest first, or the fastest then newest.

    `count` rows in all; `fastest`: the passing rows with timings, fastest
    first, at least `limit // 2` where there are; `newest`: at least `limit`
    rows (all of them when `count <= limit`), newest first.
    """
    if count <= limit:
        return [("", list(newest[:count]))], ""
    chosen_fastest = list(fastest[: limit // 2])
    chosen = {row.id for row in chosen_fastest}
    others = [row for row in newest if row.id not in chosen][: limit - len(chosen_fastest)]
    note = (f"showing {len(chosen_fastest) + len(others):,} of {count:,} candidates; every one "
            "is in the run's run.db (`kernelevo show`, `kernelevo export`)")
    groups = [(f"the {len(chosen_fastest):,} fastest", chosen_fastest),
              (f"the {len(others):,} newest of the others", others)]
    return [(caption, group) for caption, group in groups if group], note


def candidate_table(rows: Sequence[CandidateRow], limit: int = ROW_LIMIT) -> CandidateTable:
    """Every row newest first, or at most `limit`: the fastest half, then the newest."""
    timed = [row for row in rows if row.status == "ok" and row.speedup_vs_eager is not None]
    fastest = sorted(timed, key=lambda row: -(row.speedup_vs_eager or 0.0))
    groups, note = choose_rows(len(rows), fastest, list(reversed(rows)), limit)
    return CandidateTable(tuple(RowGroup(caption, tuple(chosen)) for caption, chosen in groups),
                          note)
