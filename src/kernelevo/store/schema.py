"""The run store's database: its connection settings, opening a file for reading or writing.

The tables are in tables.py; bringing an older file up to date in migrate.py.

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

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernelevo.errors import DamagedStore, StoreError
from kernelevo.store.readonly import StoreConnection, connect_read_only, stand_in
from kernelevo.store.offers import (ArchiveOffers, has_offers, kept_offers, offers_in_order,
                                    scan_offers)
from kernelevo.store.steps import Step, best_kernel_id, read_steps
from kernelevo.store.migrate import ensure_schema, indexes_on, inspect_layout, refuse_empty
from kernelevo.store.tables import BUSY_TIMEOUT_MS
from kernelevo.store.transactions import rollback, write_error

__all__ = ["DamagedStore", "Database", "StoreError"]


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
            refuse_empty(path)  # before SQLite would write a header into it
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
                assert layout is not None  # inspected above whenever read_only
                self._connection.absent_indexes = frozenset(layout.missing_indexes) | (
                    indexes_on(layout.missing_columns))
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
