"""Opening a run database to read it without writing a byte, even in a read-only folder.

A reader (`show`, `runs`, `report`, the UI, `export`) must leave run.db as it
found it: a run folder may be committed to git, shared, or read-only. So:
- the file is opened `mode=ro`, or `immutable=1` when no write-ahead log
  holds anything: then SQLite creates no `-wal`/`-shm` beside it and needs
  no write permission on the folder. A log with frames (a live run, or one
  killed before its last checkpoint) must be read through, so that case uses
  `mode=ro`, which SQLite can do only where it may create `run.db-shm`.
  A writer that opens the run during an immutable read appends to a new
  log; the read keeps the state it began with unless that writer
  checkpoints into run.db meanwhile (after about 1,000 pages of writes):
  rare within a read of a second or two, and the UI reads again on its
  next refresh.
- what an older KernelEvo did not keep (the running totals, the best-so-far
  steps) is filled into TEMP tables of this connection from the same scans a
  migration runs: slower, written nowhere. A column it did not have (a
  verdict's speedup interval) is read as NULL through a TEMP view of the
  table under the table's own name, which SQLite looks up before the file's.
  Indexes cannot be stood in for, so an `INDEXED BY` naming one the file
  lacks (or one of a table seen through a view) is dropped from the query
  and SQLite plans it without.
"""

from __future__ import annotations

import re
import sqlite3
import urllib.request
from pathlib import Path
from typing import Any

from kernelevo.errors import StoreError
from kernelevo.store.steps import STEP_TABLES, seed_steps
from kernelevo.store.tally import TALLY_TABLES, seed_tallies, statements

_INDEXED_BY = re.compile(r"\bINDEXED\s+BY\s+(\w+)", re.IGNORECASE)


class StoreConnection(sqlite3.Connection):
    """A connection that plans without the indexes its file lacks (`absent_indexes`)."""

    absent_indexes: frozenset[str] = frozenset()

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        if self.absent_indexes and "INDEXED" in sql.upper():
            sql = _INDEXED_BY.sub(
                lambda found: "" if found.group(1) in self.absent_indexes else found.group(0),
                sql)
        return super().execute(sql, parameters)


def connect_read_only(path: Path, timeout_s: float) -> StoreConnection:
    """Open `path` for reading only; StoreError naming the file and the fix if it cannot be."""
    log = Path(f"{path}-wal")
    quiet = not log.exists() or log.stat().st_size == 0
    # immutable: no locks, no -shm; safe while no log holds frames for this file.
    uri = "file:" + urllib.request.pathname2url(str(path.absolute())) + (
        "?immutable=1" if quiet else "?mode=ro")
    connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                                 timeout=timeout_s, factory=StoreConnection)
    connection.row_factory = sqlite3.Row
    try:
        connection.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.OperationalError as exc:
        connection.close()
        if quiet:
            raise StoreError(f"cannot read {path}: {exc}: check its permissions") from exc
        raise StoreError(
            f"cannot read {path}: its last writes are still in {log.name}, which SQLite reads "
            f"only where it may create {path.name}-shm beside it ({exc}): copy the run folder "
            "somewhere writable (cp -r) and read the copy") from exc
    except sqlite3.DatabaseError:
        return connection  # not SQLite at all: the schema check names the damage
    return connection


def stand_in(connection: sqlite3.Connection, tallies: bool, steps: bool,
             columns: tuple[tuple[str, str], ...] = ()) -> None:
    """TEMP tables holding what an older store lacks, filled by a migration's scans;
    TEMP views adding the (table, column) pairs it lacks, as NULL."""
    tables: dict[str, list[str]] = {}
    for table, column in columns:
        tables.setdefault(table, []).append(column)
    for table, names in tables.items():  # first: the scans below read them
        added = ", ".join(f"NULL AS {name}" for name in names)
        connection.execute(f"CREATE TEMP VIEW {table} AS SELECT *, {added} FROM main.{table}")
    if tallies:
        _temp_tables(connection, TALLY_TABLES)
        seed_tallies(connection)
    if steps:
        _temp_tables(connection, STEP_TABLES)
        seed_steps(connection)


def _temp_tables(connection: sqlite3.Connection, script: str) -> None:
    """The script's tables only, as TEMP tables: they shadow any stale one of the file."""
    for statement in statements(script):
        if statement.startswith("CREATE TABLE IF NOT EXISTS"):
            connection.execute(statement.replace("CREATE TABLE IF NOT EXISTS",
                                                 "CREATE TEMP TABLE", 1))
