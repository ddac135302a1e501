"""The durable run store: one SQLite file per run, `<runs_dir>/<run_id>/run.db`.

Every public write is one short transaction, so a process killed at any
moment leaves a database holding every write that returned, and the one in
progress either whole or not at all. Resume
reads what was left unfinished: candidates still `proposed` or `evaluating`
(`pending`) and LLM calls still `started` (`interrupted_llm_calls`), whose
cost is bounded by the `cost_bound_usd` recorded when the call began.

Threads: one connection behind a lock. SQLite admits one writer at a time
anyway; a single connection means our own threads never meet SQLITE_BUSY,
and allocating the next candidate id is atomic. Each call holds the lock for
one sub-millisecond transaction plus an fsync, negligible next to the seconds
an LLM call or an evaluation takes, so calling it from the asyncio loop
thread and from evaluation callback threads is fine. Other processes (the UI,
`kernelevo show`) open their own RunStore with `read`, which never writes to
the file (store_readonly); WAL lets them read while the run writes. Only
`open` (resume, `kernelevo migrate`) brings an older file up to date. Do not
use a RunStore inherited through fork: open a new one.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelevo.candidate import Candidate
from kernelevo.errors import DamagedStore, StoreError
from kernelevo.evaluate.verdict import Verdict
from kernelevo.store.briefs import Briefs
from kernelevo.store.calls import INTERRUPTED_CALL_ERROR, LlmCallLog
from kernelevo.store.records import (
    CandidateBrief,
    Event,
    Judged,
    LlmCall,
    RankEntry,
    Ranking,
    RunInfo,
    RunSummary,
    StoredCandidate,
    Totals,
    event_from_row,
    rank_candidates,
    run_info_from_row,
    stored_candidate_from_row,
)
from kernelevo.store.schema import Database, make_run_dir
from kernelevo.store.tables import RUN_STATUSES
from kernelevo.store.rows import dumps, plain, require_row
from kernelevo.store.steps import seed_steps, steps_in_order
from kernelevo.store.tally import read_totals

__all__ = [
    "DB_NAME",
    "CandidateBrief",
    "DamagedStore",
    "INTERRUPTED_CALL_ERROR",
    "Event",
    "Judged",
    "LlmCall",
    "RankEntry",
    "Ranking",
    "RunInfo",
    "RunStore",
    "RunSummary",
    "StoreError",
    "StoredCandidate",
    "Totals",
    "new_run_id",
    "rank_candidates",
]

DB_NAME = "run.db"
# The key of Verdict.timings that holds the candidate's own samples.
CANDIDATE_TIMING_KEY = "candidate"

_CANDIDATE_COLUMNS = """
    c.id, c.sequence, c.name, c.source, c.backend, c.origin, c.parent_ids_json,
    c.inspiration_ids_json, c.island, c.cell_json, c.created_at, c.state,
    c.evaluation_attempts, v.verdict_json, v.evaluated_at, v.speedup_vs_eager_high
"""


class RunStore(LlmCallLog):
    """Read and write one run's database; build with `create` or `open`."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self.path = database.path
        self.briefs = Briefs(database)  # reads that leave sources and prompts unread
        try:
            self.run_id = self.run_info().id
        except BaseException:
            database.close()
            raise

    # -- opening -----------------------------------------------------------

    @classmethod
    def create(
        cls,
        runs_dir: str | Path,
        task_name: str,
        task_source: str,
        config: Mapping[str, Any] | Any,
        *,
        run_id: str | None = None,
    ) -> RunStore:
        """Make `<runs_dir>/<run_id>/run.db` for a new run in state 'running'."""
        run_id = run_id or new_run_id(task_name)
        run_dir = Path(runs_dir) / run_id
        make_run_dir(run_dir)
        database = None
        try:
            database = Database(run_dir / DB_NAME)
            with database.transaction() as db:
                db.execute(
                    "INSERT INTO run (id, created_at, task_name, task_source, config_json,"
                    " status) VALUES (?, ?, ?, ?, ?, 'running')",
                    (run_id, time.time(), task_name, task_source, dumps(plain(config))),
                )
            return cls(database)
        except (OSError, sqlite3.Error, StoreError) as exc:
            # A half-made run would be listed as unreadable for ever: leave none.
            if database is not None:
                database.close()
            shutil.rmtree(run_dir, ignore_errors=True)
            raise StoreError(f"cannot start run {run_id} in {runs_dir}: {exc}, then try again "
                             "(nothing of the run was kept)") from exc

    @classmethod
    def open(cls, path_or_run_dir: str | Path) -> RunStore:
        """Open an existing run to write to it (its folder or run.db); an older file is migrated."""
        return cls(_database(path_or_run_dir, read_only=False))

    @classmethod
    def read(cls, path_or_run_dir: str | Path) -> RunStore:
        """Open an existing run to read it; nothing is written, not even to an older file."""
        return cls(_database(path_or_run_dir, read_only=True))

    @property
    def upgraded(self) -> tuple[str, ...]:
        """What opening added to an older file (`open` only), in words; () for none."""
        return self._database.upgraded

    def close(self) -> None:
        self._database.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- run ---------------------------------------------------------------

    def run_info(self) -> RunInfo:
        """The run's row; a run that ended `llm_failed` or `error` shows that as its status."""
        rows = self._database.query(
            "SELECT *, (SELECT json_extract(payload_json, '$.status') FROM events"
            " WHERE kind = 'stop' ORDER BY id DESC LIMIT 1) AS outcome FROM run")
        if len(rows) != 1:
            raise DamagedStore(self.path, f"it holds {len(rows)} runs, a run database holds "
                                          "exactly one")
        return run_info_from_row(rows[0])

    def set_config(self, config: Mapping[str, Any] | Any) -> None:
        """Replace the stored settings (a resume that changes budgets or models)."""
        with self._database.transaction() as db:
            db.execute("UPDATE run SET config_json = ?", (dumps(plain(config)),))

    def set_status(self, status: str) -> None:
        """Mark the run 'running' (again, on resume), 'finished' or 'interrupted'."""
        if status not in RUN_STATUSES:
            raise StoreError(f"unknown run status {status!r}: use one of {', '.join(RUN_STATUSES)}")
        finished_at = None if status == "running" else time.time()
        with self._database.transaction() as db:
            db.execute("UPDATE run SET status = ?, finished_at = ?", (status, finished_at))

    # -- candidates --------------------------------------------------------

    def add_candidate(
        self,
        candidate: Candidate,
        *,
        island: int | None = None,
        cell: tuple[Any, ...] | None = None,
        parent_ids: tuple[str, ...] | list[str] | None = None,
        inspiration_ids: tuple[str, ...] | list[str] = (),
    ) -> str:
        """Store a new candidate in state 'proposed' and return its id ('c0001', ...)."""
        parents = list(candidate.parent_ids if parent_ids is None else parent_ids)
        cell_json = None if cell is None else dumps(list(cell))
        with self._database.transaction() as db:
            next_sequence = "SELECT COALESCE(MAX(sequence), 0) + 1 FROM candidate"
            sequence = db.execute(next_sequence).fetchone()[0]
            candidate_id = f"c{sequence:04d}"
            db.execute(
                "INSERT INTO candidate (id, run_id, sequence, name, source, source_hash, backend,"
                " origin, parent_ids_json, inspiration_ids_json, island, cell_json, created_at,"
                " state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'proposed')",
                (candidate_id, self.run_id, sequence, candidate.name, candidate.source,
                 candidate.source_hash, candidate.backend, candidate.origin, dumps(parents),
                 dumps(list(inspiration_ids)), island, cell_json, time.time()),
            )
        return candidate_id

    def mark_evaluating(self, candidate_id: str) -> None:
        """Record that an evaluation began; attempts count crashes across resumes."""
        with self._database.transaction() as db:
            cursor = db.execute(
                "UPDATE candidate SET state = 'evaluating',"
                " evaluation_attempts = evaluation_attempts + 1 WHERE id = ?",
                (candidate_id,),
            )
            require_row(cursor, "candidate", candidate_id)

    def record_verdict(self, candidate_id: str, verdict: Verdict) -> None:
        """Store the verdict (replacing any earlier one) and mark the candidate evaluated."""
        timing = verdict.timings.get(CANDIDATE_TIMING_KEY)
        with self._database.transaction() as db:
            cursor = db.execute(
                "UPDATE candidate SET state = 'evaluated' WHERE id = ?", (candidate_id,)
            )
            require_row(cursor, "candidate", candidate_id)
            # DELETE then INSERT, not REPLACE, so the tally triggers see both (store_tally).
            db.execute("DELETE FROM verdict WHERE candidate_id = ?", (candidate_id,))
            db.execute(
                "INSERT INTO verdict (candidate_id, verdict_json, status, reason,"
                " speedup_vs_eager, speedup_vs_compile, runtime_ms, evaluated_at,"
                " speedup_vs_eager_high) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (candidate_id, dumps(verdict.to_dict()), verdict.status, verdict.reason,
                 # the ranked measure's: a training step's where the backward was timed
                 verdict.ranked_speedup("eager"), verdict.ranked_speedup("compile"),
                 timing.median_ms if timing else None, time.time(),
                 verdict.ranked_speedup_high),
            )
            if not steps_in_order(db):  # a step's verdict replaced, or one judged before a step
                seed_steps(db)

    def candidate(self, candidate_id: str) -> StoredCandidate:
        rows = self._select_candidates("WHERE c.id = ?", (candidate_id,))
        if not rows:
            raise StoreError(f"run {self.run_id} has no candidate {candidate_id!r}")
        return rows[0]

    def candidates(self, state: str | None = None) -> list[StoredCandidate]:
        """All candidates in creation order, or those in one state."""
        if state is None:
            return self._select_candidates("", ())
        return self._select_candidates("WHERE c.state = ?", (state,))

    def find_by_hash(self, source_hash: str) -> StoredCandidate | None:
        """The first candidate with this exact source, to skip re-evaluating duplicates."""
        rows = self._select_candidates("WHERE c.source_hash = ?", (source_hash,))
        return rows[0] if rows else None

    def pending(self) -> list[StoredCandidate]:
        """Candidates without a verdict; those with attempts >= 1 were mid-evaluation at a crash."""
        return self._select_candidates("WHERE c.state IN ('proposed', 'evaluating')", ())

    def ranking(self) -> Ranking:
        """Passing custom kernels best first, and the PyTorch baseline (see `rank`)."""
        return self.briefs.ranking()

    def best(self) -> StoredCandidate | None:
        """The best passing custom kernel; never the PyTorch baseline; None if none passed."""
        best = self.briefs.best()
        return self.candidate(best.id) if best else None

    def ancestry(self, candidate_id: str, max_steps: int) -> dict[str, StoredCandidate]:
        """A candidate and its first-parent ancestors by id, at most `max_steps` back."""
        # UNION keeps (id, depth) pairs apart, so a cycle (a corrupt store) ends at max_steps.
        return {stored.id: stored for stored in self._select_candidates(
            "WHERE c.id IN (WITH RECURSIVE chain(id, depth) AS (SELECT ?, 0 UNION"
            " SELECT json_extract(p.parent_ids_json, '$[0]'), chain.depth + 1 FROM chain"
            " JOIN candidate p ON p.id = chain.id WHERE chain.depth < ?) SELECT id FROM chain)",
            (candidate_id, max_steps))}

    def _select_candidates(
        self, where: str, parameters: tuple[Any, ...], order: str = "c.sequence"
    ) -> list[StoredCandidate]:
        rows = self._database.query(
            f"SELECT {_CANDIDATE_COLUMNS} FROM candidate c"
            f" LEFT JOIN verdict v ON v.candidate_id = c.id {where} ORDER BY {order}",
            parameters,
        )
        return [stored_candidate_from_row(row) for row in rows]

    # -- totals and events -------------------------------------------------

    def totals(self) -> Totals:
        """Spend and outcome counts, O(1): triggers keep them (see store_tally)."""
        with self._database.transaction("DEFERRED") as db:
            return read_totals(db)

    def log_event(self, kind: str, payload: Mapping[str, Any] | None = None) -> int:
        with self._database.transaction() as db:
            cursor = db.execute(
                "INSERT INTO events (at, kind, payload_json) VALUES (?, ?, ?)",
                (time.time(), kind, dumps(plain(payload or {}))),
            )
            assert cursor.lastrowid is not None  # an INSERT sets it
            return cursor.lastrowid

    def events(self, kind: str | None = None, after_id: int = 0) -> list[Event]:
        """Events in order; `after_id` lets a watcher fetch only what is new."""
        sql = "SELECT * FROM events WHERE id > ?"
        parameters: tuple[Any, ...] = (after_id,)
        if kind is not None:
            sql, parameters = sql + " AND kind = ?", (after_id, kind)
        rows = self._database.query(sql + " ORDER BY id", parameters)
        return [event_from_row(row) for row in rows]


def _database(path_or_run_dir: str | Path, read_only: bool) -> Database:
    """The Database of a run folder or run.db path; StoreError naming it if there is none."""
    path = Path(path_or_run_dir)
    if path.is_dir():
        path = path / DB_NAME
    if not path.is_file():
        raise StoreError(
            f"no run database at {path}: give a run directory listed by `kernelevo runs`"
        )
    if not read_only:
        _refuse_read_only(path)
    try:
        return Database(path, read_only=read_only)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a readable run database: {exc}") from exc


def _refuse_read_only(path: Path) -> None:
    """StoreError when the run cannot be written: SQLite writes run.db and files beside it."""
    read_only = [str(where) for where in (path, path.parent) if not os.access(where, os.W_OK)]
    if read_only:
        raise StoreError(f"the run at {path.parent} is read-only ({' and '.join(read_only)} "
                         "cannot be written): make the run's folder and its run.db writable, "
                         "or copy the folder somewhere writable, to resume or migrate it; "
                         "runs, show, export and report read it as it is")


def new_run_id(task_name: str) -> str:
    """A sortable, readable id: UTC time, the task's name, and a random suffix."""
    slug = re.sub(r"[^a-z0-9]+", "-", task_name.lower()).strip("-")[:32] or "run"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"{stamp}-{slug}-{secrets.token_hex(2)}"
