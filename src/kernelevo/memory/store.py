"""The memory store: one SQLite file (WAL, a transaction per write, a schema version).

Durable like run.db (store/schema.py's connection settings): a write is one
transaction committed with synchronous=FULL, so a process killed mid-write
loses at most the write in progress, never one already committed.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelevo.cache_dir import cache_key
from kernelevo.errors import KernelEvoError, MemoryStoreError
from kernelevo.memory.signature import Signature
from kernelevo.store.schema import connect
from kernelevo.store.transactions import rollback, write_error

SCHEMA_VERSION = 1
_TABLES = """
CREATE TABLE IF NOT EXISTS tasks (
    key TEXT PRIMARY KEY, name TEXT NOT NULL, signature TEXT NOT NULL,
    first_seen REAL NOT NULL, last_seen REAL NOT NULL, runs INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS kernels (
    id INTEGER PRIMARY KEY, task_key TEXT NOT NULL REFERENCES tasks(key) ON DELETE CASCADE,
    source_hash TEXT NOT NULL, source TEXT NOT NULL, backend TEXT NOT NULL, speedup REAL,
    measure TEXT NOT NULL, gpu TEXT NOT NULL, run_id TEXT NOT NULL, candidate_id TEXT NOT NULL,
    recorded_at REAL NOT NULL, UNIQUE (task_key, source_hash));
CREATE TABLE IF NOT EXISTS edits (
    id INTEGER PRIMARY KEY, task_key TEXT NOT NULL REFERENCES tasks(key) ON DELETE CASCADE,
    diff TEXT NOT NULL, gain REAL NOT NULL, run_id TEXT NOT NULL, child_id TEXT NOT NULL,
    recorded_at REAL NOT NULL, UNIQUE (task_key, run_id, child_id));
CREATE TABLE IF NOT EXISTS fixes (
    id INTEGER PRIMARY KEY, task_key TEXT NOT NULL REFERENCES tasks(key) ON DELETE CASCADE,
    reason TEXT NOT NULL, occurrences INTEGER NOT NULL, diff TEXT NOT NULL,
    run_id TEXT NOT NULL, recorded_at REAL NOT NULL, UNIQUE (task_key, run_id, reason));
CREATE INDEX IF NOT EXISTS kernels_by_task ON kernels (task_key);
CREATE INDEX IF NOT EXISTS edits_by_task ON edits (task_key);
CREATE INDEX IF NOT EXISTS fixes_by_task ON fixes (task_key);
"""


@dataclass(frozen=True)
class TaskMemory:
    """A remembered task: its key (the source's hash), name and signature."""

    key: str
    name: str
    signature: Signature
    first_seen: float
    last_seen: float
    runs: int


@dataclass(frozen=True)
class KernelMemory:
    """A kernel that passed the judge on a task; `speedup` vs eager (None: untimed, CPU)."""

    task_key: str
    source: str
    backend: str
    speedup: float | None
    measure: str
    gpu: str
    run_id: str
    candidate_id: str
    id: int = 0

    @property
    def source_hash(self) -> str:
        return cache_key(self.source, digits=None)


@dataclass(frozen=True)
class EditMemory:
    """An edit (parent -> child diff) and the speedup it gained (child over parent)."""

    task_key: str
    diff: str
    gain: float
    run_id: str
    child_id: str


@dataclass(frozen=True)
class FixMemory:
    """A failure reason seen `occurrences` times in a run, and the diff that fixed it."""

    task_key: str
    reason: str
    occurrences: int
    diff: str
    run_id: str


class MemoryStore:
    """The memory of past runs: tasks, their best kernels, edits that paid, fixes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._connection = connect(self.path)
        except (OSError, sqlite3.Error, KernelEvoError) as exc:
            raise MemoryStoreError(f"cannot open the memory store {self.path}: {exc}; set "
                                   "[memory] path to a writable file, or run with "
                                   "--no-memory") from exc
        self._lock = threading.RLock()
        try:
            self._ensure_schema()
        except BaseException:
            self._connection.close()
            raise

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _ensure_schema(self) -> None:
        version = self._connection.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise MemoryStoreError(f"the memory store {self.path} has schema version {version}; "
                                   f"this KernelEvo reads version {SCHEMA_VERSION}: upgrade "
                                   "KernelEvo, or set [memory] path to another file")
        if version < SCHEMA_VERSION:
            with self._write() as connection:
                for statement in _TABLES.split(";"):
                    if statement.strip():
                        connection.execute(statement)
                connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, committed whole or not at all."""
        with self._lock:
            try:
                self._connection.execute("BEGIN IMMEDIATE")
                yield self._connection
                self._connection.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                rollback(self._connection)
                raise MemoryStoreError(str(write_error(self.path, exc) or
                                           f"cannot write {self.path}: {exc}")) from exc
            except BaseException:
                rollback(self._connection)
                raise

    def _query(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._connection.execute(sql, parameters).fetchall()

    # -- writes ----------------------------------------------------------------

    def note_task(self, key: str, name: str, signature: Signature, runs_added: int = 0,
                  runs_at_least: int = 0) -> None:
        """Remember a task (or refresh it), counting `runs_added` more runs of it; an import
        gives `runs_at_least` instead, so importing a file twice counts its runs once."""
        now = time.time()
        with self._write() as connection:
            connection.execute(
                "INSERT INTO tasks (key, name, signature, first_seen, last_seen, runs) "
                "VALUES (?, ?, ?, ?, ?, max(?, ?)) ON CONFLICT (key) DO UPDATE SET "
                "name = excluded.name, signature = excluded.signature, "
                "last_seen = excluded.last_seen, runs = max(tasks.runs + ?, ?)",
                (key, name, signature.to_json(), now, now, runs_added, runs_at_least,
                 runs_added, runs_at_least))

    def add_kernel(self, kernel: KernelMemory) -> bool:
        """Keep a passing kernel of a remembered task; a faster timing of it replaces the
        slower. True when it was new."""
        with self._write() as connection:
            known = connection.execute(
                "SELECT speedup FROM kernels WHERE task_key = ? AND source_hash = ?",
                (kernel.task_key, kernel.source_hash)).fetchone()
            if known is None:
                connection.execute(
                    "INSERT INTO kernels (task_key, source_hash, source, backend, speedup, "
                    "measure, gpu, run_id, candidate_id, recorded_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (kernel.task_key, kernel.source_hash, kernel.source, kernel.backend,
                     kernel.speedup, kernel.measure, kernel.gpu, kernel.run_id,
                     kernel.candidate_id, time.time()))
            elif kernel.speedup is not None and kernel.speedup > (known["speedup"] or 0.0):
                connection.execute(
                    "UPDATE kernels SET speedup = ?, measure = ?, gpu = ? "
                    "WHERE task_key = ? AND source_hash = ?",
                    (kernel.speedup, kernel.measure, kernel.gpu, kernel.task_key,
                     kernel.source_hash))
            return known is None

    def add_edit(self, edit: EditMemory) -> None:
        with self._write() as connection:
            connection.execute(
                "INSERT OR IGNORE INTO edits (task_key, diff, gain, run_id, child_id, "
                "recorded_at) VALUES (?, ?, ?, ?, ?, ?)",
                (edit.task_key, edit.diff, edit.gain, edit.run_id, edit.child_id, time.time()))

    def add_fix(self, fix: FixMemory) -> None:
        with self._write() as connection:
            connection.execute(
                "INSERT INTO fixes (task_key, reason, occurrences, diff, run_id, recorded_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (task_key, run_id, reason) DO UPDATE SET "
                "occurrences = excluded.occurrences, diff = excluded.diff",
                (fix.task_key, fix.reason, fix.occurrences, fix.diff, fix.run_id, time.time()))

    def forget(self, key: str) -> dict[str, int]:
        """Remove a task and everything remembered of it; the rows removed by table."""
        with self._write() as connection:
            removed = {table: connection.execute(
                f"SELECT count(*) FROM {table} WHERE task_key = ?", (key,)).fetchone()[0]
                for table in ("kernels", "edits", "fixes")}
            removed["tasks"] = connection.execute("DELETE FROM tasks WHERE key = ?",
                                                  (key,)).rowcount
        return removed

    # -- reads -----------------------------------------------------------------

    def tasks(self) -> list[TaskMemory]:
        return [_task(row) for row in self._query("SELECT * FROM tasks ORDER BY last_seen DESC")]

    def find_tasks(self, name_or_key: str) -> list[TaskMemory]:
        """Tasks whose key starts with `name_or_key`, or whose name is it."""
        return [_task(row) for row in self._query(
            "SELECT * FROM tasks WHERE key LIKE ? || '%' OR name = ? ORDER BY last_seen DESC",
            (name_or_key, name_or_key))]

    def kernels(self, key: str, limit: int = 100) -> list[KernelMemory]:
        """A task's kernels, fastest first (untimed ones after, oldest first)."""
        return [KernelMemory(row["task_key"], row["source"], row["backend"], row["speedup"],
                             row["measure"], row["gpu"], row["run_id"], row["candidate_id"],
                             row["id"])
                for row in self._query(
                    "SELECT * FROM kernels WHERE task_key = ? ORDER BY speedup IS NULL, "
                    "speedup DESC, id LIMIT ?", (key, limit))]

    def edits(self, key: str, limit: int = 100) -> list[EditMemory]:
        return [EditMemory(row["task_key"], row["diff"], row["gain"], row["run_id"],
                           row["child_id"])
                for row in self._query("SELECT * FROM edits WHERE task_key = ? "
                                       "ORDER BY gain DESC, id LIMIT ?", (key, limit))]

    def fixes(self, key: str, limit: int = 100) -> list[FixMemory]:
        return [FixMemory(row["task_key"], row["reason"], row["occurrences"], row["diff"],
                          row["run_id"])
                for row in self._query("SELECT * FROM fixes WHERE task_key = ? "
                                       "ORDER BY occurrences DESC, id LIMIT ?", (key, limit))]

    def counts(self, key: str) -> dict[str, int]:
        """How many kernels, edits and fixes a task has."""
        return {table: self._query(f"SELECT count(*) FROM {table} WHERE task_key = ?",
                                   (key,))[0][0] for table in ("kernels", "edits", "fixes")}


def _task(row: sqlite3.Row) -> TaskMemory:
    return TaskMemory(row["key"], row["name"], Signature.from_json(row["signature"]),
                      row["first_seen"], row["last_seen"], row["runs"])
