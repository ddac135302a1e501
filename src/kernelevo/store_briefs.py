"""Light reads of a run: what tables, plots, the archive and the best-kernel rule need.

Sources, verdict JSON, prompts and replies are nearly all of a run's bytes
(356 MB at 50,000 candidates); reading them all made a report of such a run
take 13 s to write and the UI hold every prompt in memory. These queries
leave them unread, and the covering indexes of store_schema.INDEXES answer
them without visiting the rows that hold them. A page then reads in full
only the few candidates and calls it shows (RunStore.candidate, .ancestry,
.llm_calls_of).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from kernelevo.evaluate.verdict import NO_CUSTOM_KERNEL_FLAG, Verdict
from kernelevo.store_records import (
    BASELINE_BACKEND,
    KERNEL_BACKENDS,
    CandidateBrief,
    RankEntry,
    Ranking,
    rank,
    rank_entry_from_row,
)
from kernelevo.store_schema import Database

_RANK_COLUMNS = ("c.id, c.sequence, c.backend, c.origin, v.status, v.speedup_vs_eager,"
                 " v.speedup_vs_compile, v.evaluated_at")
# A verdict's JSON is parsed only when it names the flag at all.
_FLAGGED = "CASE WHEN instr(v.verdict_json, ?) > 0 THEN v.verdict_json END AS flagged_json"
_NOT_FLAGGED = ("(instr(v.verdict_json, ?) = 0 OR NOT EXISTS"
                " (SELECT 1 FROM json_each(v.verdict_json, '$.flags') WHERE value = ?))")
_KERNEL_BACKENDS = "(" + ", ".join(f"'{backend}'" for backend in KERNEL_BACKENDS) + ")"
# The best kernel in the order of store_records.rank: timed ones fastest
# first, then (a run without a GPU) the first judged.
_BEST_QUERIES = (("IS NOT NULL", "v.speedup_vs_eager DESC, v.evaluated_at, c.sequence"),
                 ("IS NULL", "v.evaluated_at, c.sequence"))


class Briefs:
    """A run's light reads; RunStore.briefs."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def candidates(self) -> list[CandidateBrief]:
        """Every candidate in creation order, without its source."""
        rows = self._database.query(
            f"SELECT {_RANK_COLUMNS}, {_FLAGGED}, c.name, c.parent_ids_json, c.island,"
            " c.cell_json, c.created_at, c.state, v.reason, v.runtime_ms"
            " FROM candidate c LEFT JOIN verdict v ON v.candidate_id = c.id ORDER BY c.sequence",
            (NO_CUSTOM_KERNEL_FLAG,))
        parsed: dict[str, Any] = {}  # cells and parent lists repeat: parse each text once

        def load(text: str) -> Any:
            if text not in parsed:
                parsed[text] = tuple(json.loads(text))
            return parsed[text]

        return [CandidateBrief(
            id=row[0], sequence=row[1], backend=row[2], origin=row[3], status=row[4],
            speedup_vs_eager=row[5], speedup_vs_compile=row[6], evaluated_at=row[7],
            flags=_flags(row[8]), name=row[9], parent_ids=load(row[10]), island=row[11],
            cell=None if row[12] is None else load(row[12]), created_at=row[13], state=row[14],
            reason=row[15], runtime_ms=row[16]) for row in rows]

    def spend_over_time(self) -> list[tuple[float, int, float]]:
        """(finished_at, tokens, dollars) of every finished call, in finishing order."""
        rows = self._database.query(
            "SELECT finished_at, input_tokens + output_tokens, cost_usd FROM llm_call"
            " WHERE finished_at IS NOT NULL ORDER BY finished_at, id")
        return [(row[0], row[1], row[2]) for row in rows]

    def spend_of(self, candidate_ids: Iterable[str]) -> dict[str, tuple[int, float]]:
        """Tokens and dollars of the calls linked to each of these candidates."""
        rows = self._database.query(
            "SELECT candidate_id, SUM(input_tokens + output_tokens), SUM(cost_usd) FROM llm_call"
            " WHERE candidate_id IN (SELECT value FROM json_each(?)) GROUP BY candidate_id",
            (json.dumps(list(candidate_ids)),))
        return {row[0]: (row[1], row[2]) for row in rows}

    def models(self) -> list[tuple[str, int, int, float]]:
        """(model, calls, tokens, dollars) per model, in the order each was first called."""
        rows = self._database.query(
            "SELECT model, COUNT(*), SUM(input_tokens + output_tokens), SUM(cost_usd)"
            " FROM llm_call GROUP BY model ORDER BY MIN(id)")
        return [(row[0], row[1], row[2], row[3]) for row in rows]

    def ranking(self) -> Ranking:
        """Every candidate ranked (store_records.rank) from the columns the rule reads."""
        rows = self._database.query(
            f"SELECT {_RANK_COLUMNS}, {_FLAGGED}"
            " FROM candidate c LEFT JOIN verdict v ON v.candidate_id = c.id",
            (NO_CUSTOM_KERNEL_FLAG,))
        return rank(rank_entry_from_row(row) for row in rows)

    def best(self) -> RankEntry | None:
        """`rank(...).best` from an index: the same candidate, in well under a millisecond."""
        for speedup_test, order in _BEST_QUERIES:
            rows = self._database.query(
                f"SELECT {_RANK_COLUMNS}, NULL AS flagged_json FROM verdict v"
                " JOIN candidate c ON c.id = v.candidate_id"
                f" WHERE v.status = 'ok' AND v.speedup_vs_eager {speedup_test}"
                f" AND c.backend IN {_KERNEL_BACKENDS} AND {_NOT_FLAGGED}"
                f" ORDER BY {order} LIMIT 1",
                (NO_CUSTOM_KERNEL_FLAG, NO_CUSTOM_KERNEL_FLAG))
            if rows:
                return rank_entry_from_row(rows[0])
        return None

    def baseline(self) -> RankEntry | None:
        """`rank(...).baseline`: the first PyTorch seed, else the first PyTorch candidate."""
        for origin_test in ("AND c.origin = 'seed'", ""):
            rows = self._database.query(
                f"SELECT {_RANK_COLUMNS}, {_FLAGGED} FROM candidate c"
                " LEFT JOIN verdict v ON v.candidate_id = c.id"
                f" WHERE c.backend = ? {origin_test} ORDER BY c.sequence LIMIT 1",
                (NO_CUSTOM_KERNEL_FLAG, BASELINE_BACKEND))
            if rows:
                return rank_entry_from_row(rows[0])
        return None

    def proposed_count(self) -> int:
        """Candidates of every origin but 'seed': what the candidate budget counts."""
        rows = self._database.query("SELECT COUNT(*) FROM candidate WHERE origin != 'seed'")
        return int(rows[0][0])

    def environment(self) -> dict[str, str]:
        """Versions and device of the last verdict naming any, one judged on a GPU first."""
        rows = self._database.query(
            "SELECT v.verdict_json FROM verdict v JOIN candidate c ON c.id = v.candidate_id"
            " WHERE json_extract(v.verdict_json, '$.environment') != '{}'"
            " ORDER BY COALESCE(json_extract(v.verdict_json, '$.environment.gpu'), '') != ''"
            " DESC, c.sequence DESC LIMIT 1")
        if not rows:
            return {}
        return dict(Verdict.from_dict(json.loads(rows[0][0])).environment)


def _flags(flagged_json: str | None) -> tuple[str, ...]:
    return tuple(json.loads(flagged_json).get("flags", ())) if flagged_json else ()
