"""Which candidate rows a page shows: all of a small run, a bounded choice of a large one.

One HTML row per candidate made a 50,000-candidate report 57 MB and 43 s to
first paint; past `ROW_LIMIT` rows the page shows the fastest and the newest
halves and says where the rest are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kernelevo.report.data import CandidateRow

ROW_LIMIT = 200


@dataclass(frozen=True)
class RowGroup:
    """Rows under one caption; the caption is empty when the table shows every row."""

    caption: str
    rows: tuple[CandidateRow, ...]


@dataclass(frozen=True)
class CandidateTable:
    groups: tuple[RowGroup, ...]
    note: str  # why rows are missing and where to find them; "" when none are


def candidate_table(rows: Sequence[CandidateRow], limit: int = ROW_LIMIT) -> CandidateTable:
    """Every row newest first, or at most `limit`: the fastest half, then the newest."""
    if len(rows) <= limit:
        return CandidateTable((RowGroup("", tuple(reversed(rows))),), "")
    timed = [row for row in rows if row.status == "ok" and row.speedup_vs_eager is not None]
    fastest = sorted(timed, key=lambda row: -(row.speedup_vs_eager or 0.0))[: limit // 2]
    chosen = {row.id for row in fastest}
    newest = [row for row in reversed(rows) if row.id not in chosen][: limit - len(fastest)]
    note = (f"showing {len(fastest) + len(newest):,} of {len(rows):,} candidates; every one is "
            "in the run's run.db (`kernelevo show`, `kernelevo export`)")
    groups = (RowGroup(f"the {len(fastest):,} fastest", tuple(fastest)),
              RowGroup(f"the {len(newest):,} newest of the others", tuple(newest)))
    return CandidateTable(tuple(group for group in groups if group.rows), note)
