"""Bringing a run store up to date: a new file's schema, an older one's missing parts.

Only a writer (`--resume`, `kernelevo migrate`) upgrades; a reader sees an
older file as it is. A damaged store (empty, not SQLite, a table or column
missing) is refused, never rebuilt.
"""

from __future__ import annotations

import functools
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from kernelevo.errors import DamagedStore, StoreError
from kernelevo.store.offers import (OFFER_TABLES, drop_offers, has_offers, offers_in_order,
                                    seed_offers)
from kernelevo.store.steps import STEP_TABLES, drop_steps, has_steps, seed_steps, steps_in_order
from kernelevo.store.tally import TALLY_TABLES, seed_tallies, statements
from kernelevo.store.tables import (INDEXES, INDEXES_OF_LATER_COLUMNS, LATER_COLUMNS,
                                    SCHEMA_VERSION, TABLES)
from kernelevo.store.transactions import rollback, write_error


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
    refuse_empty(path)
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
        for index in INDEXES_OF_LATER_COLUMNS:
            connection.execute(f"DROP INDEX IF EXISTS {index}")


def indexes_on(missing: tuple[tuple[str, str], ...]) -> frozenset[str]:
    """The indexes of the tables a reader sees through a view (a view has none to name)."""
    tables = {table for table, _ in missing}
    return frozenset(name for name, sql in INDEXES.items()
                     if any(f" ON {table}(" in sql for table in tables))


def refuse_empty(path: Path) -> None:
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

