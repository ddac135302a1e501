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

import json
import re
import secrets
import shutil
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import Verdict
from kernelevo.store.briefs import Briefs
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
    llm_call_from_row,
    rank_candidates,
    run_info_from_row,
    stored_candidate_from_row,
)
from kernelevo.store.schema import (RUN_STATUSES, DamagedStore, Database, StoreError,
                                    make_run_dir)
from kernelevo.store.tally import read_totals

__all__ = [
    "DB_NAME",
    "CandidateBrief",
    "DamagedStore",
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
INTERRUPTED_CALL_ERROR = "interrupted: the run stopped before the reply was recorded"

_CANDIDATE_COLUMNS = """
    c.id, c.sequence, c.name, c.source, c.backend, c.origin, c.parent_ids_json,
    c.inspiration_ids_json, c.island, c.cell_json, c.created_at, c.state,
    c.evaluation_attempts, v.verdict_json, v.evaluated_at
"""


class RunStore:
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
                    (run_id, time.time(), task_name, task_source, _dumps(_plain(config))),
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
            db.execute("UPDATE run SET config_json = ?", (_dumps(_plain(config)),))

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
        cell_json = None if cell is None else _dumps(list(cell))
        with self._database.transaction() as db:
            next_sequence = "SELECT COALESCE(MAX(sequence), 0) + 1 FROM candidate"
            sequence = db.execute(next_sequence).fetchone()[0]
            candidate_id = f"c{sequence:04d}"
            db.execute(
                "INSERT INTO candidate (id, run_id, sequence, name, source, source_hash, backend,"
                " origin, parent_ids_json, inspiration_ids_json, island, cell_json, created_at,"
                " state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'proposed')",
                (candidate_id, self.run_id, sequence, candidate.name, candidate.source,
                 candidate.source_hash, candidate.backend, candidate.origin, _dumps(parents),
                 _dumps(list(inspiration_ids)), island, cell_json, time.time()),
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
            _require_row(cursor, "candidate", candidate_id)

    def record_verdict(self, candidate_id: str, verdict: Verdict) -> None:
        """Store the verdict (replacing any earlier one) and mark the candidate evaluated."""
        timing = verdict.timings.get(CANDIDATE_TIMING_KEY)
        with self._database.transaction() as db:
            cursor = db.execute(
                "UPDATE candidate SET state = 'evaluated' WHERE id = ?", (candidate_id,)
            )
            _require_row(cursor, "candidate", candidate_id)
            # DELETE then INSERT, not REPLACE, so the tally triggers see both (store_tally).
            db.execute("DELETE FROM verdict WHERE candidate_id = ?", (candidate_id,))
            db.execute(
                "INSERT INTO verdict (candidate_id, verdict_json, status, reason,"
                " speedup_vs_eager, speedup_vs_compile, runtime_ms, evaluated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (candidate_id, _dumps(verdict.to_dict()), verdict.status, verdict.reason,
                 verdict.speedup_vs_eager, verdict.speedup_vs_compile,
                 timing.median_ms if timing else None, time.time()),
            )

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

    # -- LLM calls ---------------------------------------------------------

    def start_llm_call(
        self,
        model: str,
        prompt: Any,
        *,
        max_output_tokens: int | None = None,
        cost_bound_usd: float | None = None,
    ) -> int:
        """Record a request before it is sent; `cost_bound_usd` is its worst-case price."""
        with self._database.transaction() as db:
            cursor = db.execute(
                "INSERT INTO llm_call (model, prompt_json, max_output_tokens, cost_bound_usd,"
                " started_at, state) VALUES (?, ?, ?, ?, ?, 'started')",
                (model, _dumps(prompt), max_output_tokens, cost_bound_usd, time.time()),
            )
            return int(cursor.lastrowid)

    def finish_llm_call(
        self,
        call_id: int,
        response_text: str,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float,
        latency_s: float,
        candidate_id: str | None = None,
        note: str = "",
    ) -> None:
        """Record the reply, the tokens and dollars it is charged, and a `note` if an estimate."""
        with self._database.transaction() as db:
            # A finished call's `error` holds the note: why its tokens are an estimate.
            cursor = db.execute(
                "UPDATE llm_call SET state = 'finished', response_text = ?, input_tokens = ?,"
                " output_tokens = ?, cost_usd = ?, latency_s = ?, candidate_id = ?,"
                " finished_at = ?, error = ? WHERE id = ? AND state = 'started'",
                (response_text, input_tokens, output_tokens, cost_usd, latency_s,
                 candidate_id, time.time(), note or None, call_id),
            )
            _require_row(cursor, "started LLM call", call_id)

    def link_llm_call(self, call_id: int, candidate_id: str) -> None:
        """Attach a finished call to the candidate parsed from its reply."""
        with self._database.transaction() as db:
            cursor = db.execute(
                "UPDATE llm_call SET candidate_id = ? WHERE id = ?", (candidate_id, call_id)
            )
            _require_row(cursor, "LLM call", call_id)

    def fail_llm_call(
        self,
        call_id: int,
        error: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd: float = 0.0,
    ) -> None:
        """Record a failed request; pass the tokens if the provider billed them."""
        with self._database.transaction() as db:
            cursor = db.execute(
                "UPDATE llm_call SET state = 'failed', error = ?, input_tokens = ?,"
                " output_tokens = ?, cost_usd = ?, finished_at = ?"
                " WHERE id = ? AND state = 'started'",
                (error, input_tokens, output_tokens, cost_usd, time.time(), call_id),
            )
            _require_row(cursor, "started LLM call", call_id)

    def llm_calls(self, state: str | None = None) -> list[LlmCall]:
        if state is None:
            rows = self._database.query("SELECT * FROM llm_call ORDER BY id")
        else:
            rows = self._database.query(
                "SELECT * FROM llm_call WHERE state = ? ORDER BY id", (state,)
            )
        return [llm_call_from_row(row) for row in rows]

    def llm_calls_of(self, candidate_ids: Iterable[str]) -> list[LlmCall]:
        """The calls linked to these candidates, in order, with prompts and replies."""
        rows = self._database.query(
            "SELECT * FROM llm_call WHERE candidate_id IN (SELECT value FROM json_each(?))"
            " ORDER BY id", (json.dumps(list(candidate_ids)),))
        return [llm_call_from_row(row) for row in rows]

    def llm_modes_of(self, candidate_ids: Iterable[str]) -> dict[str, str]:
        """Each candidate's proposal mode, from the last call linked to it (report.call_mode).

        Only the prompt's `mode` is read: no reply (stored after the prompt in
        each row, so its pages stay unread) and no call object is made.
        """
        rows = self._database.query(
            "SELECT candidate_id, json_extract(prompt_json, '$.mode') FROM llm_call"
            " WHERE candidate_id IN (SELECT value FROM json_each(?)) ORDER BY id",
            (json.dumps(list(candidate_ids)),))
        return {row[0]: "" if row[1] is None else str(row[1]) for row in rows}

    def interrupted_llm_calls(self) -> list[LlmCall]:
        """Calls still 'started': in flight now, or cut off by a crash if read on resume."""
        return self.llm_calls("started")

    def settle_interrupted_llm_calls(self) -> float:
        """On resume only: fail every started call, charged at its bound; returns dollars.

        Input tokens are the prompt's own `max_input_tokens` where the caller
        recorded one, else the prompt's JSON length in bytes, which bounds them too.
        """
        with self._database.transaction() as db:
            row = db.execute(
                "SELECT COALESCE(SUM(cost_bound_usd), 0) FROM llm_call WHERE state = 'started'"
            ).fetchone()
            # The provider may have billed the full reply, so count the worst case as paid.
            db.execute(
                "UPDATE llm_call SET state = 'failed', error = ?, finished_at = ?,"
                " input_tokens = COALESCE(json_extract(prompt_json, '$.max_input_tokens'),"
                " length(CAST(prompt_json AS BLOB))),"
                " output_tokens = COALESCE(max_output_tokens, 0),"
                " cost_usd = COALESCE(cost_bound_usd, 0) WHERE state = 'started'",
                (INTERRUPTED_CALL_ERROR, time.time()),
            )
        return float(row[0])

    # -- totals and events -------------------------------------------------

    def totals(self) -> Totals:
        """Spend and outcome counts, O(1): triggers keep them (see store_tally)."""
        with self._database.transaction("DEFERRED") as db:
            return read_totals(db)

    def log_event(self, kind: str, payload: Mapping[str, Any] | None = None) -> int:
        with self._database.transaction() as db:
            cursor = db.execute(
                "INSERT INTO events (at, kind, payload_json) VALUES (?, ?, ?)",
                (time.time(), kind, _dumps(_plain(payload or {}))),
            )
            return int(cursor.lastrowid)

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
    try:
        return Database(path, read_only=read_only)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a readable run database: {exc}") from exc


def new_run_id(task_name: str) -> str:
    """A sortable, readable id: UTC time, the task's name, and a random suffix."""
    slug = re.sub(r"[^a-z0-9]+", "-", task_name.lower()).strip("-")[:32] or "run"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"{stamp}-{slug}-{secrets.token_hex(2)}"


def _require_row(cursor: sqlite3.Cursor, what: str, key: object) -> None:
    if cursor.rowcount == 0:
        raise StoreError(f"no {what} with id {key!r} in this run")


def _plain(value: Any) -> Any:
    """Dataclass config trees become dicts so they can be stored as JSON."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value


def _dumps(value: Any) -> str:
    # default=str keeps Paths and enums in a config readable instead of failing the run.
    return json.dumps(value, default=str, sort_keys=True)
