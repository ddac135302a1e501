"""The run store's SQLite schema, connection settings, version check and migration.

Settings, and why:
- WAL journal: readers (`kernelevo show`, the web UI) never block the writer,
  and a commit is one append to the log, so a SIGKILL between any two
  statements leaves either the whole transaction or none of it.
- synchronous=FULL: in WAL mode NORMAL already survives a killed process, but
  a power loss may drop the last commits. Those commits are the dollar
  ledger (finished LLM calls) and verdicts that cost GPU minutes; the store
  writes a few rows per candidate, seconds apart, so one fsync per commit
  costs nothing a user could notice.
- foreign_keys=ON: a verdict or LLM call can never name a missing candidate.
- busy_timeout: another process (the UI, a second `show`) may hold a brief
  lock; waiting a few seconds beats failing a write of the run.

Readers never write (store_readonly): only a writer (`--resume`, `kernelevo
migrate`) brings an older store up to date. A damaged store (empty, not
SQLite, a table or column missing) is refused by both, never rebuilt.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelevo.candidate import ORIGINS
from kernelevo.errors import DamagedStore, StoreError
from kernelevo.store.readonly import StoreConnection, connect_read_only, stand_in
from kernelevo.store.records import OTHER_BACKEND_SQL
from kernelevo.store.offers import (OFFER_TABLES, ArchiveOffers, drop_offers, has_offers,
                                    kept_offers, offers_in_order, scan_offers, seed_offers)
from kernelevo.store.steps import (STEP_TABLES, Step, best_kernel_id, drop_steps, has_steps,
                                   read_steps, seed_steps, steps_in_order)
from kernelevo.store.tally import TALLY_TABLES, seed_tallies, statements

__all__ = ["DamagedStore", "Database", "StoreError"]

# 2: running totals kept by triggers (store_tally); a version 1 database
# gains them, filled from a scan, the first time a writer opens it.
# 3: the high end of each verdict's speedup interval (verdict.speedup_vs_eager_high),
# which the archive and the best-so-far steps compare with; an older database
# gains the column (NULL: no interval, so its verdicts compare as before).
SCHEMA_VERSION = 3
BUSY_TIMEOUT_MS = 10_000

RUN_STATUSES = ("running", "finished", "interrupted")
CANDIDATE_STATES = ("proposed", "evaluating", "evaluated")
LLM_CALL_STATES = ("started", "finished", "failed")


def _enum(column: str, values: tuple[str, ...]) -> str:
    quoted = ", ".join(f"'{value}'" for value in values)
    return f"CHECK ({column} IN ({quoted}))"


TABLES = f"""
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS run (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    task_name TEXT NOT NULL,
    task_source TEXT NOT NULL,
    config_json TEXT NOT NULL,
    status TEXT NOT NULL {_enum("status", RUN_STATUSES)},
    finished_at REAL
);
CREATE TABLE IF NOT EXISTS candidate (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES run(id),
    sequence INTEGER NOT NULL UNIQUE,
    name TEXT NOT NULL,
    source TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    backend TEXT NOT NULL,
    origin TEXT NOT NULL {_enum("origin", ORIGINS)},
    parent_ids_json TEXT NOT NULL,
    inspiration_ids_json TEXT NOT NULL,
    island INTEGER,
    cell_json TEXT,
    created_at REAL NOT NULL,
    state TEXT NOT NULL {_enum("state", CANDIDATE_STATES)},
    evaluation_attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS candidate_state ON candidate(state);
CREATE INDEX IF NOT EXISTS candidate_hash ON candidate(source_hash);
CREATE TABLE IF NOT EXISTS verdict (
    candidate_id TEXT PRIMARY KEY REFERENCES candidate(id),
    verdict_json TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    speedup_vs_eager REAL,
    speedup_vs_compile REAL,
    runtime_ms REAL,
    evaluated_at REAL NOT NULL,
    speedup_vs_eager_high REAL
);
CREATE INDEX IF NOT EXISTS verdict_status ON verdict(status);
CREATE TABLE IF NOT EXISTS llm_call (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    candidate_id TEXT REFERENCES candidate(id),
    model TEXT NOT NULL,
    prompt_json TEXT NOT NULL,
    response_text TEXT,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    latency_s REAL,
    max_output_tokens INTEGER,
    cost_bound_usd REAL,
    started_at REAL NOT NULL,
    finished_at REAL,
    state TEXT NOT NULL {_enum("state", LLM_CALL_STATES)},
    error TEXT
);
CREATE INDEX IF NOT EXISTS llm_call_state ON llm_call(state);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    payload_json TEXT NOT NULL
);
"""


# Indexes for the reads that must stay fast at any run size (store_briefs).
# An older KernelEvo reads a database that has them, so they need no new
# schema version: a run made before them gains them the next time a writer
# opens it (`--resume`, `kernelevo migrate`: a second or two at 50,000
# candidates, once); a reader plans its queries without them.
INDEXES = {
    # The best-kernel query visits the fastest passing verdicts first; it
    # also covers the status timeline's read of every verdict.
    "verdict_best": "CREATE INDEX IF NOT EXISTS verdict_best"
                    " ON verdict(status, speedup_vs_eager DESC, evaluated_at)",
    # Covering: a source precedes these columns in its row, and a real one
    # spills into overflow pages that a scan would otherwise read.
    "candidate_brief": "CREATE INDEX IF NOT EXISTS candidate_brief ON candidate(sequence, id,"
                       " name, backend, origin, parent_ids_json, island, cell_json, created_at,"
                       " state)",
    # Covering, for the same reason with prompts and replies (most of a run's
    # bytes); it also finds a candidate's own calls.
    "llm_call_spend": "CREATE INDEX IF NOT EXISTS llm_call_spend ON llm_call(candidate_id,"
                      " model, state, input_tokens, output_tokens, cost_usd, finished_at)",
    # What was spent by each best-so-far step: sums over a range of finishing times.
    "llm_call_finished": "CREATE INDEX IF NOT EXISTS llm_call_finished ON llm_call(finished_at,"
                         " input_tokens, output_tokens, cost_usd)",
    # Answered calls charged an estimate carry a note in `error` (few rows):
    # summed with every tick of the totals, so covering and partial.
    "llm_call_estimated": "CREATE INDEX IF NOT EXISTS llm_call_estimated ON llm_call(state,"
                          " input_tokens, output_tokens, cost_usd, error)"
                          " WHERE state = 'finished' AND error IS NOT NULL",
    # Failed calls the server answered unusably (an empty answer; few rows):
    # their tokens are billed, not estimated; summed with the totals too.
    "llm_call_billed_failure": "CREATE INDEX IF NOT EXISTS llm_call_billed_failure ON"
                               " llm_call(state, input_tokens, output_tokens, cost_usd,"
                               " response_text) WHERE state = 'failed'"
                               " AND response_text IS NOT NULL",
    # The run's last `stop` event says how it ended (RunStore.run_info).
    "events_kind": "CREATE INDEX IF NOT EXISTS events_kind ON events(kind, id)",
    # The latest event's time and the run's longest clock (the UI's run page,
    # the budget of a resumed run): one entry of an index each, where a scan
    # of every event (or every `elapsed` one) took seconds at 200,000
    # candidates with a cold cache. Partial: only `elapsed` events carry one.
    "events_at": "CREATE INDEX IF NOT EXISTS events_at ON events(at)",
    "events_elapsed": "CREATE INDEX IF NOT EXISTS events_elapsed ON"
                      " events(json_extract(payload_json, '$.elapsed_s'))"
                      " WHERE kind = 'elapsed'",
    # Covering: a verdict's figures by its candidate, so the archive, the
    # ranking's counts and the timeline never read a verdict's JSON (~2 KB a row).
    "verdict_figures": "CREATE INDEX IF NOT EXISTS verdict_figures ON verdict(candidate_id,"
                       " status, speedup_vs_eager, speedup_vs_compile, evaluated_at, runtime_ms,"
                       " reason, speedup_vs_eager_high)",
    # Partial: the few verdicts that name the no-custom-kernel flag, which the
    # kernel rule sets apart (store_records.FLAGGED_VERDICTS, the same WHERE).
    "verdict_flagged": "CREATE INDEX IF NOT EXISTS verdict_flagged ON verdict(candidate_id)"
                       " WHERE instr(verdict_json, 'no_custom_kernel') > 0",
    # Partial: the few candidates of a backend that is not a kernel's, so the
    # ranking counts kernels as passing verdicts less these and the flagged
    # ones, never joining all 200,000 verdicts to their candidates.
    "candidate_other": "CREATE INDEX IF NOT EXISTS candidate_other ON candidate(id, backend)"
                       f" WHERE {OTHER_BACKEND_SQL}",
    # Partial: the run's starting candidates (a handful), found by their source's
    # hash, and counted so the candidate budget's spend (every other origin) is
    # all candidates less these, not a scan of 200,000 rows on resume.
    "candidate_seed": "CREATE INDEX IF NOT EXISTS candidate_seed ON candidate(source_hash,"
                      " origin) WHERE origin = 'seed'",
    # Thin, for the first and last moments (one entry each) and the status
    # timeline's counts per span, which otherwise read the wide candidate_brief
    # and verdict_best: 0.6-0.8 s of a 200,000-candidate page's cold answer.
    "candidate_made": "CREATE INDEX IF NOT EXISTS candidate_made ON candidate(created_at)",
    "verdict_judged": "CREATE INDEX IF NOT EXISTS verdict_judged ON verdict(evaluated_at, status)",
}


# Columns added after a table was first made, with the version that added
# them: an older store lacks them until a writer adds them (as NULL, an
# unknown), and a reader sees them as NULL through a view (store_readonly).
LATER_COLUMNS = {("verdict", "speedup_vs_eager_high"): 3}
# Indexes that hold a later column: made again when a writer adds it.
_INDEXES_OF_LATER_COLUMNS = ("verdict_figures",)


class Database:
    """One connection with the store's settings, serialised by a lock.

    A writer (the default) creates a new file's schema or brings an older
    one up to date; `read_only` opens the file without writing to it
    (store_readonly). Both refuse a damaged file (DamagedStore).
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        existed = path.exists()
        if existed:
            _refuse_empty(path)  # before SQLite would write a header into it
        try:
            self._connection = (connect_read_only(path, BUSY_TIMEOUT_MS / 1000) if read_only
                                else connect(path))
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):
                raise
            raise DamagedStore(path, f"it is not an SQLite database ({exc})") from exc
        self._lock = threading.RLock()
        try:
            layout = inspect_layout(self._connection, path) if existed or read_only else None
            if read_only:
                self._connection.absent_indexes = frozenset(layout.missing_indexes) | (
                    _indexes_on(layout.missing_columns))
                stand_in(self._connection, not layout.has_tallies, not layout.has_steps,
                         layout.missing_columns)
                self.upgraded: tuple[str, ...] = ()
            else:
                self.upgraded = ensure_schema(self._connection, path, layout)
        except BaseException:
            self._connection.close()
            raise

    @contextmanager
    def transaction(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """One transaction; IMMEDIATE for writes, DEFERRED for consistent multi-reads."""
        if self.read_only and mode != "DEFERRED":
            raise StoreError(f"{self.path} was opened for reading only: open the run with "
                             "RunStore.open (or resolve.open_run(write=True)) to write to it")
        # IMMEDIATE takes the write lock up front, so a read-then-write (like
        # allocating the next sequence number) cannot race another process.
        with self._lock:
            try:
                self._connection.execute(f"BEGIN {mode}")
                yield self._connection
                self._connection.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                rollback(self._connection)
                raise write_error(self.path, exc) or exc
            except BaseException:
                rollback(self._connection)
                raise

    def query(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._connection.execute(sql, parameters).fetchall()

    def read_offers(self) -> ArchiveOffers:
        """The archive's offers: as the triggers keep them, else from a scan (store_offers)."""
        with self.transaction("DEFERRED") as connection:  # one state of a live run
            if has_offers(connection) and offers_in_order(connection):
                return kept_offers(connection)
            return scan_offers(connection)

    def read_steps(self) -> list[Step]:
        """The best-so-far steps: as the triggers keep them, else from a scan (store_steps)."""
        with self.transaction("DEFERRED") as connection:
            return read_steps(connection)

    def best_kernel_id(self) -> str | None:
        """The run's best timed kernel, the last step against eager (store_steps)."""
        with self.transaction("DEFERRED") as connection:
            return best_kernel_id(connection)

    def close(self) -> None:
        with self._lock:
            self._connection.close()


def make_run_dir(run_dir: Path) -> None:
    """Make a new run's folder; StoreError naming the runs folder and the fix if it cannot be."""
    runs_dir = run_dir.parent
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except FileExistsError as exc:
        if not runs_dir.is_dir():
            raise StoreError(f"the runs folder {runs_dir} is a file, not a folder: give "
                             "--runs-dir (or KERNELEVO_RUNS_DIR) a folder") from exc
        raise StoreError(f"run directory {run_dir} exists: resume it or pick another id") from exc
    except NotADirectoryError as exc:
        raise StoreError(f"the runs folder {runs_dir} is not a folder (a file is in its "
                         "path): give --runs-dir (or KERNELEVO_RUNS_DIR) a folder") from exc
    except OSError as exc:
        raise StoreError(f"cannot make the run folder {run_dir}: {exc.strerror or exc}; "
                         "give --runs-dir a folder you can write to") from exc


def rollback(connection: sqlite3.Connection) -> None:
    """Undo an open transaction; one SQLite already undid (a full disk does) is left alone."""
    if connection.in_transaction:
        try:
            connection.execute("ROLLBACK")
        except sqlite3.OperationalError:
            pass  # the error that led here says more than "cannot rollback"


def write_error(path: Path, error: sqlite3.OperationalError) -> StoreError | None:
    """A StoreError naming the file and the fix for a full or failing disk; else None."""
    text = str(error)
    if "disk is full" in text:
        return StoreError(f"cannot write {path}: the disk is full ({text}): free space on its "
                          "filesystem (df -h)")
    if "disk I/O error" in text or "readonly" in text:
        return StoreError(f"cannot write {path}: {text}: check the disk and its permissions")
    return None


def connect(path: Path) -> StoreConnection:
    """Open `path` with the store's settings; the caller serialises access."""
    # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE ... COMMIT)
    # so each public write is exactly one transaction, never merged by the driver.
    connection = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000,
        factory=StoreConnection,
    )
    connection.row_factory = sqlite3.Row
    try:
        mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise StoreError(
                f"{path}: SQLite refused WAL mode (got {mode!r}); keep runs on a local disk, "
                "not a network filesystem"
            )
        connection.execute("PRAGMA synchronous = FULL")
        connection.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        connection.close()
        raise
    return connection


def ensure_schema(connection: sqlite3.Connection, path: Path,
                  layout: Layout | None) -> tuple[str, ...]:
    """Create a new file's schema, or bring an older one (`layout`) up to date.

    Returns what was added to an older file, () when nothing was. A damaged
    file never gets here: inspect_layout refused it.
    """
    if layout is not None and layout.current:
        return ()  # the common case: no write lock needed just to open a run
    connection.execute("BEGIN IMMEDIATE")
    try:
        found = _stored_version(connection)
        if found is not None and found > SCHEMA_VERSION:
            raise _newer(path, found)
        _add_later_columns(connection, layout.missing_columns if layout is not None else ())
        # Like the indexes, the best-so-far steps (store_steps) are derived:
        # those of an older version are made afresh and filled from a scan.
        steps_kept = has_steps(connection)
        if not steps_kept:
            drop_steps(connection)
        steps_stale = not (steps_kept and steps_in_order(connection))
        # The archive's offers likewise; kept ones that lost their order (a
        # verdict deleted) are filled afresh too.
        offers_kept = has_offers(connection)
        if not offers_kept:
            drop_offers(connection)
        offers_stale = not (offers_kept and offers_in_order(connection))
        for statement in (statements(TABLES + TALLY_TABLES) + list(INDEXES.values())
                          + statements(STEP_TABLES) + statements(OFFER_TABLES)):
            connection.execute(statement)
        if found is None or found < 2:  # the tallies came with version 2
            seed_tallies(connection)
        if steps_stale:
            seed_steps(connection)
        if offers_stale:
            seed_offers(connection)
        connection.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
            (str(SCHEMA_VERSION),),
        )
        connection.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        rollback(connection)
        raise write_error(path, exc) or exc
    except BaseException:
        rollback(connection)
        raise
    return layout.outdated() if layout is not None else ()


@dataclass(frozen=True)
class Layout:
    """What an undamaged store holds of the current schema."""

    version: int
    missing_indexes: frozenset[str]
    has_tallies: bool
    has_steps: bool  # the best-so-far steps kept, and in order
    has_offers: bool = True  # the archive's offers kept, and in order
    # (table, column) of LATER_COLUMNS that this store lacks
    missing_columns: tuple[tuple[str, str], ...] = ()

    @property
    def current(self) -> bool:
        return not self.outdated()

    def outdated(self) -> tuple[str, ...]:
        """What a writer adds to bring this store up to date, in words."""
        return tuple(part for part, lacking in (
            (f"schema version {self.version} -> {SCHEMA_VERSION}",
             self.version != SCHEMA_VERSION),
            ("the verdicts' speedup intervals", self.missing_columns),
            ("running totals", not self.has_tallies),
            ("best-so-far steps", not self.has_steps),
            ("the archive's offers", not self.has_offers),
            (f"indexes {', '.join(sorted(self.missing_indexes))}", self.missing_indexes),
        ) if lacking)


def inspect_layout(connection: sqlite3.Connection, path: Path) -> Layout:
    """The store's layout; DamagedStore if it is empty, not SQLite or lacks part of its schema."""
    _refuse_empty(path)
    try:
        columns = _columns(connection)
    except sqlite3.DatabaseError as exc:
        raise DamagedStore(path, f"it is not an SQLite database ({exc})") from exc
    expected = _expected_columns()
    core = [table for table in _CORE_TABLES if table not in columns]
    if core:
        raise DamagedStore(path, f"its table(s) {', '.join(core)} are missing (dropped, or "
                                 "the file is not a run database)")
    version = _version_or_damage(connection, path)
    later: list[tuple[str, str]] = []
    for table, names in expected.items():
        lacking = sorted(names - columns[table]) if table in columns else []
        added_since = [name for name in lacking if LATER_COLUMNS.get((table, name), 0) > version]
        later += [(table, name) for name in added_since]
        lacking = [name for name in lacking if name not in added_since]
        if lacking:
            raise DamagedStore(path, f"its table {table} lacks the column(s) "
                                     f"{', '.join(lacking)}")
    has_tallies = all(table in columns for table in _TALLY_TABLES)
    if version >= 2 and not has_tallies:
        raise DamagedStore(path, f"its running totals ({', '.join(_TALLY_TABLES)}) are "
                                 f"missing from a version {version} store")
    return Layout(version, frozenset(_missing_indexes(connection)), has_tallies,
                  "best_step" in columns and has_steps(connection)
                  and steps_in_order(connection),
                  "archive_order" in columns and has_offers(connection)
                  and offers_in_order(connection), tuple(later))


def _add_later_columns(connection: sqlite3.Connection,
                       missing: tuple[tuple[str, str], ...]) -> None:
    """Add the LATER_COLUMNS an older store lacks; the indexes holding them are made again."""
    for table, column in missing:
        connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} REAL")
    if missing:
        for index in _INDEXES_OF_LATER_COLUMNS:
            connection.execute(f"DROP INDEX IF EXISTS {index}")


def _indexes_on(missing: tuple[tuple[str, str], ...]) -> frozenset[str]:
    """The indexes of the tables a reader sees through a view (a view has none to name)."""
    tables = {table for table, _ in missing}
    return frozenset(name for name, sql in INDEXES.items()
                     if any(f" ON {table}(" in sql for table in tables))


def _refuse_empty(path: Path) -> None:
    if path.exists() and path.stat().st_size == 0:
        raise DamagedStore(path, "it is empty (0 bytes), no run was ever written to it")


_CORE_TABLES = ("meta", "run", "candidate", "verdict", "llm_call", "events")
_TALLY_TABLES = ("llm_call_tally", "candidate_tally")


def _version_or_damage(connection: sqlite3.Connection, path: Path) -> int:
    try:
        found = _stored_version(connection)
    except ValueError as exc:
        raise DamagedStore(path, f"its schema version is not a number ({exc})") from exc
    if found is None:
        raise DamagedStore(path, "its meta table holds no schema version")
    if found > SCHEMA_VERSION:
        raise _newer(path, found)
    return found


def _newer(path: Path, found: int) -> StoreError:
    return StoreError(f"{path} has schema version {found}, this KernelEvo reads up to "
                      f"{SCHEMA_VERSION}: upgrade KernelEvo to open it")


def _columns(connection: sqlite3.Connection) -> dict[str, set[str]]:
    tables = [row[0] for row in connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {table: {row[1] for row in connection.execute(f"PRAGMA table_info('{table}')")}
            for table in tables}


@functools.cache
def _expected_columns() -> dict[str, frozenset[str]]:
    """Each core table's columns, read from the schema itself so the two never disagree."""
    memory = sqlite3.connect(":memory:")
    try:
        for statement in statements(TABLES):
            memory.execute(statement)
        return {table: frozenset(names) for table, names in _columns(memory).items()
                if table in _CORE_TABLES}
    finally:
        memory.close()


def _stored_version(connection: sqlite3.Connection) -> int | None:
    has_meta = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if not has_meta:
        return None
    row = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else None


def _missing_indexes(connection: sqlite3.Connection) -> set[str]:
    present = {row[0] for row in connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index'")}
    return set(INDEXES) - present
