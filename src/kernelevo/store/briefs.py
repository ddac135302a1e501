"""Light reads of a run: what tables, plots, the archive and the best-kernel rule need.

Sources, verdict JSON, prompts and replies are nearly all of a run's bytes
(356 MB at 50,000 candidates); reading them all made a report of such a run
take 13 s to write and the UI hold every prompt in memory. These queries
leave them unread, and the covering indexes of store/tables.INDEXES answer
them without visiting the rows that hold them. Where SQLite can sum, sort or
pick the few rows a page shows, it does, so no Python object is made per
candidate except where a search's order must be replayed. A page then reads
in full only the few candidates and calls it shows (RunStore.candidate,
.ancestry, .llm_calls_of).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any, NamedTuple

from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import NO_CUSTOM_KERNEL_FLAG, Verdict
from kernelevo.store.records import (
    BASELINE_BACKEND,
    FLAGGED_VERDICTS,
    OTHER_BACKEND_SQL,
    RANK_ORDER_SQL,
    CandidateBrief,
    Judged,
    RankEntry,
    Ranking,
    kernel_sql,
    rank_entry_from_row,
)
from kernelevo.store.offers import ArchiveOffers
from kernelevo.store.schema import Database
from kernelevo.store.steps import Step

_RANK_COLUMNS = ("c.id, c.sequence, c.backend, c.origin, v.status, v.speedup_vs_eager,"
                 " v.speedup_vs_compile, v.evaluated_at, v.speedup_vs_eager_high")
# A verdict's JSON is parsed only when it names the flag at all.
_FLAGGED = "CASE WHEN instr(v.verdict_json, ?) > 0 THEN v.verdict_json END AS flagged_json"
_BRIEF_COLUMNS = (f"{_RANK_COLUMNS}, {_FLAGGED}, c.name, c.parent_ids_json, c.island,"
                  " c.cell_json, c.created_at, c.state, v.reason, v.runtime_ms")
# RankEntry.is_kernel in SQL: the one rule (store_records.kernel_sql). It reads
# no verdict's JSON but those few that name the flag (an index finds them).
_KERNEL = kernel_sql("v.status", "c.backend", "v.candidate_id")
# Candidate first: `CROSS JOIN` keeps SQLite scanning the candidate_brief
# index and finding verdicts by id, never reading a candidate's row (and
# its source) to find its cell or backend.
_JUDGED = ("candidate c CROSS JOIN verdict v INDEXED BY verdict_figures"
           " ON v.candidate_id = c.id")
# Every candidate, judged or not, read the same way.
_ALL = "candidate c LEFT JOIN verdict v INDEXED BY verdict_figures ON v.candidate_id = c.id"
_NO_ENVIRONMENT = '{"environment": {}'
# One entry of an index each, whatever the number of events (schema.INDEXES);
# the expression is the partial index's own, so SQLite can read it there.
_LAST_AT = "SELECT MAX(at) FROM events INDEXED BY events_at"
_LONGEST_ELAPSED = ("SELECT MAX(json_extract(payload_json, '$.elapsed_s')) FROM events"
                    " INDEXED BY events_elapsed WHERE kind = 'elapsed'")


class EventSummary(NamedTuple):
    """last_at: the latest event's time; elapsed_s: the largest 'elapsed' (None
    without one); stop_reason: the last stop's (None without one)."""

    last_at: float | None
    elapsed_s: float | None
    stop_reason: str | None
    migrations: int


class Briefs:
    """A run's light reads; RunStore.briefs."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def candidates(self, *, newest_first: bool = False,
                   limit: int | None = None) -> list[CandidateBrief]:
        """Candidates without their sources in creation order (or the reverse), `limit` at most."""
        return self._briefs("candidate c LEFT JOIN verdict v ON v.candidate_id = c.id", "",
                            "c.sequence DESC" if newest_first else "c.sequence",
                            -1 if limit is None else limit)

    def fastest(self, limit: int) -> list[CandidateBrief]:
        """The `limit` fastest passing candidates with timings (any backend), ties oldest first."""
        return self._briefs("verdict v JOIN candidate c ON c.id = v.candidate_id",
                            "WHERE v.status = 'ok' AND v.speedup_vs_eager IS NOT NULL",
                            "v.speedup_vs_eager DESC, c.sequence", limit)

    def _briefs(self, tables: str, where: str, order: str, limit: int) -> list[CandidateBrief]:
        rows = self._database.query(
            f"SELECT {_BRIEF_COLUMNS} FROM {tables} {where} ORDER BY {order} LIMIT ?",
            (NO_CUSTOM_KERNEL_FLAG, limit))
        return [CandidateBrief(
            id=row[0], sequence=row[1], backend=row[2], origin=row[3], status=row[4],
            speedup_vs_eager=row[5], speedup_vs_compile=row[6], evaluated_at=row[7],
            speedup_vs_eager_high=row[8], flags=_flags(row[9]), name=row[10],
            parent_ids=tuple(json.loads(row[11])), island=row[12],
            cell=None if row[13] is None else tuple(json.loads(row[13])),
            created_at=row[14], state=row[15], reason=row[16], runtime_ms=row[17])
            for row in rows]

    def judged_in_order(self) -> list[Judged]:
        """Every verdict in the order judged: what the archive and best-so-far lines replay."""
        rows = self._database.query(
            "SELECT c.id, c.cell_json, c.island, v.status, v.speedup_vs_eager,"
            f" v.speedup_vs_compile, v.evaluated_at, {_KERNEL}, v.speedup_vs_eager_high"
            f" FROM {_JUDGED} ORDER BY v.evaluated_at, c.sequence")
        cells: dict[str | None, tuple[Any, ...]] = {None: ()}  # a few cells, repeated
        for row in rows:
            if row[1] not in cells:
                cells[row[1]] = tuple(json.loads(row[1]))
        return [Judged(row[0], cells[row[1]], row[2], row[3], row[4], row[5], row[6],
                       bool(row[7]), row[8]) for row in rows]

    def best_steps(self) -> list[Step]:
        """The best-so-far steps of both metrics (store_steps), each in the order judged."""
        return self._database.read_steps()

    def spend_by(self, moments: list[float]) -> list[tuple[int, float]]:
        """Tokens and dollars of the calls finished by each moment (ascending order)."""
        spent, tokens, cost_usd, previous = [], 0, 0.0, -math.inf
        for moment in moments:
            # Each span's sum reads only its own calls: one pass over the
            # finishing-time index for all the moments together.
            rows = self._database.query(
                "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), COALESCE(SUM(cost_usd), 0)"
                " FROM llm_call WHERE finished_at > ? AND finished_at <= ?", (previous, moment))
            tokens, cost_usd = tokens + rows[0][0], cost_usd + rows[0][1]
            spent.append((tokens, cost_usd))
            previous = moment
        return spent

    def archive_offers(self) -> ArchiveOffers:
        """What `Archive.replay` of judged_in_order needs, without a row per verdict.

        A passing verdict no faster than an earlier one in its own cell of its
        own island is always refused (an elite only ever gets fitter), so only
        the others matter, each with its place in the order; failures are
        counted per cell, since their order changes nothing. The triggers of
        store_offers keep them as verdicts are written; a run without them (an
        older one, read without writing) or whose verdicts lost their order is
        scanned instead.
        """
        return self._database.read_offers()

    def event_summary(self) -> EventSummary:
        """The few things a page shows of the events log, summed by SQLite."""
        rows = self._database.query(
            f"SELECT ({_LAST_AT}), ({_LONGEST_ELAPSED}),"
            " (SELECT COALESCE(json_extract(payload_json, '$.reason'), '') FROM events"
            "  WHERE kind = 'stop' ORDER BY id DESC LIMIT 1),"
            " (SELECT COUNT(*) FROM events WHERE kind = 'migration')")
        last_at, elapsed_s, stop_reason, migrations = rows[0]
        return EventSummary(last_at, elapsed_s, stop_reason, migrations)

    def longest_elapsed_s(self) -> float:
        """The run's own clock as last recorded, in seconds (0.0 before any)."""
        ((elapsed_s,),) = self._database.query(_LONGEST_ELAPSED)
        return float(elapsed_s or 0.0)

    def moments(self) -> tuple[float, float] | None:
        """The first and the last moment a candidate was made or judged; None before any."""
        # One MIN or MAX per subquery: each is then one entry of an index.
        rows = self._database.query(
            "SELECT MIN(made_first, COALESCE(judged_first, made_first)),"
            " MAX(made_last, COALESCE(judged_last, made_last))"
            " FROM (SELECT (SELECT MIN(created_at) FROM candidate) AS made_first,"
            " (SELECT MAX(created_at) FROM candidate) AS made_last,"
            " (SELECT MIN(evaluated_at) FROM verdict) AS judged_first,"
            " (SELECT MAX(evaluated_at) FROM verdict) AS judged_last)")
        first, last = rows[0]
        return None if first is None else (first, last)

    def status_changes(self, first: float, width: float,
                       spans: int) -> list[tuple[float, float, str | None, int]]:
        """Candidates made and judged per span of time, in time order.

        Rows are (span, its last moment, status, count): status None counts
        candidates made, any other the verdicts of that status. With spans=0
        every moment is a span of its own; otherwise the `first` moment is,
        and the rest fall into `spans` spans of `width` seconds from it, the
        last one closed (svg.thin_timeline's cut).
        """
        def span(moment: str) -> str:
            return moment if spans == 0 else (
                f"CASE WHEN {moment} = ? THEN -1.0"
                f" ELSE MIN(CAST(({moment} - ?) / ? AS INTEGER), ?) END")

        rows = self._database.query(
            f"SELECT * FROM (SELECT {span('created_at')} AS span, MAX(created_at), NULL,"
            " COUNT(*) FROM candidate GROUP BY span UNION ALL SELECT"
            f" {span('evaluated_at')} AS span, MAX(evaluated_at), status, COUNT(*)"
            " FROM verdict GROUP BY span, status) ORDER BY span",
            (first, first, width, spans) * 2 if spans else ())
        return [(row[0], row[1], row[2], row[3]) for row in rows]

    def ranking(self, limit: int | None = None) -> Ranking:
        """The ranking of store_records.rank, from indexes: the best `limit` kernels (all
        by default) in its order, and how every other candidate fared, counted by SQLite."""
        baseline = self.baseline()
        judged, failed, kernels, everything = self._counts(baseline)
        return Ranking(kernels=tuple(self._kernels(kernels if limit is None else limit)),
                       baseline=baseline, judged=judged, failed=failed,
                       not_kernels=judged - failed - kernels, pending=everything - judged)

    def _counts(self, baseline: RankEntry | None) -> tuple[int, int, int, int]:
        """(judged, failed, kernels, every candidate), the baseline left out.

        Each from a small index: candidates and verdicts counted by the
        narrowest index that covers them, and kernels as passing verdicts
        less those of another backend (the partial index candidate_other)
        or flagged (verdict_flagged). Joining every verdict to its candidate
        read 40 MB at random at 200,000 candidates: a second with a cold
        page cache.
        """
        # The running totals count every candidate by status (store_tally): a
        # handful of rows, where COUNT(*) reads an index of all 200,000.
        ((everything,),) = self._database.query(
            "SELECT COALESCE(SUM(count), 0) FROM candidate_tally")
        ((judged, failed, passed),) = self._database.query(
            "SELECT COUNT(*), COALESCE(SUM(status != 'ok'), 0), COALESCE(SUM(status = 'ok'), 0)"
            " FROM verdict")
        ((not_kernels,),) = self._database.query(
            "SELECT COUNT(*) FROM verdict v INDEXED BY verdict_figures"
            f" WHERE v.candidate_id IN (SELECT id FROM candidate WHERE {OTHER_BACKEND_SQL}"
            f" UNION {FLAGGED_VERDICTS}) AND v.status = 'ok'")
        kernels = passed - not_kernels
        if baseline is not None:  # the baseline is of another backend: never a kernel
            everything -= 1
            if baseline.status is not None:
                judged -= 1
                failed -= baseline.status != "ok"
        return judged, failed, kernels, everything

    def best(self) -> RankEntry | None:
        """`rank(...).best`: the first of the ranking, found from indexes in a millisecond."""
        kernels = self._kernels(1)
        return kernels[0] if kernels else None

    def _kernels(self, limit: int) -> list[RankEntry]:
        """The best `limit` passing custom kernels: `incumbent`, the last step against
        eager (store_steps), then the rest in RANK_ORDER_SQL's order."""
        if limit < 1:
            return []
        found: list[RankEntry] = []
        leader = self._database.best_kernel_id()
        if leader is not None:
            found += [rank_entry_from_row(row) for row in self._database.query(
                f"SELECT {_RANK_COLUMNS}, {_FLAGGED} FROM verdict v"
                " JOIN candidate c ON c.id = v.candidate_id WHERE c.id = ?",
                (NO_CUSTOM_KERNEL_FLAG, leader))]
        for part, order in RANK_ORDER_SQL:
            if len(found) >= limit:
                break
            rows = self._database.query(
                f"SELECT {_RANK_COLUMNS}, {_FLAGGED} FROM verdict v INDEXED BY verdict_best"
                f" JOIN candidate c ON c.id = v.candidate_id WHERE {part} AND {_KERNEL}"
                f" AND c.id IS NOT ? ORDER BY {order} LIMIT ?",
                (NO_CUSTOM_KERNEL_FLAG, leader, limit - len(found)))
            found += [rank_entry_from_row(row) for row in rows]
        return found

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

    def is_seed(self, candidate: Candidate) -> bool:
        """Whether one of the run's starting candidates has exactly this source."""
        rows = self._database.query(
            "SELECT 1 FROM candidate WHERE source_hash = ? AND origin = 'seed' AND source = ?"
            " LIMIT 1", (candidate.source_hash, candidate.source))
        return bool(rows)

    def proposed_count(self) -> int:
        """Candidates of every origin but 'seed': what the candidate budget counts."""
        # The running totals count every candidate by status (store_tally): a
        # handful of rows, where COUNT(*) reads an index of all 200,000.
        ((everything,),) = self._database.query(
            "SELECT COALESCE(SUM(count), 0) FROM candidate_tally")
        ((seeds,),) = self._database.query(
            "SELECT COUNT(*) FROM candidate WHERE origin = 'seed'")  # index candidate_seed
        return int(everything - seeds)

    def by_origin(self) -> dict[str, int]:
        """How many candidates came from each origin (seed, llm, repair, tuner)."""
        rows = self._database.query("SELECT origin, COUNT(*) FROM candidate GROUP BY origin")
        return {row[0]: int(row[1]) for row in rows}

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

    def environment(self) -> dict[str, str]:
        """Versions and device of the last verdict naming any, one judged on a GPU first."""
        rows = self._database.query(
            "SELECT v.verdict_json FROM verdict v JOIN candidate c ON c.id = v.candidate_id"
            # Most verdicts name none, and the store writes keys sorted, so
            # theirs begins so: a prefix compare, not a parse of each verdict.
            " WHERE substr(v.verdict_json, 1, ?) != ?"
            " AND json_extract(v.verdict_json, '$.environment') != '{}'"
            " ORDER BY COALESCE(json_extract(v.verdict_json, '$.environment.gpu'), '') != ''"
            " DESC, c.sequence DESC LIMIT 1", (len(_NO_ENVIRONMENT), _NO_ENVIRONMENT))
        if not rows:
            return {}
        return dict(Verdict.from_dict(json.loads(rows[0][0])).environment)


def _flags(flagged_json: str | None) -> tuple[str, ...]:
    return tuple(json.loads(flagged_json).get("flags", ())) if flagged_json else ()
