"""Best-so-far steps of a run, kept by SQLite triggers so a page reads a few rows.

The report's and the UI's best-so-far lines step up where a passing custom
kernel beats the best judged before it (in the order judged: time, then
creation). Finding those steps replayed every verdict (0.4 s at 50,000
candidates, on every page), so the steps live in `best_step`, updated in the
same transaction as each verdict, like the tallies of store_tally.

Against eager, "beats" means beyond the best's interval: a kernel is a step
only when its speedup is above the last step's `speedup_to_beat` (the high
end of what a rerun of its timing can show; its speedup without an
interval), so the last step is the run's best kernel (records.incumbent)
and noise never moves it. Against torch.compile, which decides nothing, the
steps are a running maximum of the speedups.

A verdict written in order (after every step) is a step exactly when it
beats the last one; no other verdict changes. One written before a step of
speedup_vs_eager, or the deletion of any step's verdict (a candidate judged
again), can change later steps in ways a trigger cannot follow (a chain of
intervals needs a pass in order), so those triggers mark the steps as out
of order instead: readers then scan the verdicts (`scan_steps`), and the
writer that wrote them fills the steps afresh in the same transaction
(RunStore.record_verdict). A run made before this table gains it, filled by
the same scan, the first time a writer opens it (store/migrate.ensure_schema).
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from kernelevo.store.records import kernel_sql, speedup_to_beat

METRICS = ("speedup_vs_eager", "speedup_vs_compile")


class Step(NamedTuple):
    """A verdict that set a new best of one metric; `evaluated_at` in epoch seconds."""

    metric: str
    candidate_id: str
    speedup: float
    evaluated_at: float


def _is_kernel(verdict: str, backend: str) -> str:
    """RankEntry.is_kernel in SQL (store_records.kernel_sql), for a trigger or a scan."""
    return kernel_sql(f"{verdict}.status", backend, f"{verdict}.candidate_id")


# Every passing kernel's speedups in the order judged (both metrics' scans start here).
_TIMED = ("SELECT v.evaluated_at, c.sequence, c.id, v.{metric}, {high}"
          " FROM candidate c JOIN verdict v ON v.candidate_id = c.id"
          " WHERE v.{metric} IS NOT NULL AND {kernel} ORDER BY v.evaluated_at, c.sequence")
_SEQUENCE = "(SELECT sequence FROM candidate WHERE id = NEW.candidate_id)"
_PLACE = f"(NEW.evaluated_at, {_SEQUENCE})"
_BACKEND = "(SELECT backend FROM candidate WHERE id = NEW.candidate_id)"
_EAGER, _COMPILE = METRICS


def _eager_trigger() -> str:
    """A step when above the last step's `speedup_to_beat`; with a step after the new
    verdict's place, the steps are out of order instead (the writer scans them)."""
    eager = f"NEW.{_EAGER}"
    return f"""
CREATE TRIGGER IF NOT EXISTS best_step_{_EAGER} AFTER INSERT ON verdict
WHEN {eager} IS NOT NULL AND {_is_kernel('NEW', _BACKEND)}
BEGIN
    UPDATE best_step_order SET in_order = 0 WHERE EXISTS (
        SELECT 1 FROM best_step WHERE metric = '{_EAGER}' AND (evaluated_at, sequence) > {_PLACE});
    INSERT INTO best_step (metric, evaluated_at, sequence, candidate_id, speedup, speedup_to_beat)
        SELECT '{_EAGER}', NEW.evaluated_at, {_SEQUENCE}, NEW.candidate_id, {eager},
               MAX({eager}, COALESCE(NEW.speedup_vs_eager_high, {eager}))
        WHERE NOT EXISTS (SELECT 1 FROM best_step WHERE metric = '{_EAGER}'
                          AND (speedup_to_beat >= {eager} OR (evaluated_at, sequence) > {_PLACE}));
END;
"""


def _compile_trigger() -> str:
    """A running maximum: a step when no step at or before its place is as fast, ending
    every later step it is at least as fast as."""
    speedup = f"NEW.{_COMPILE}"
    return f"""
CREATE TRIGGER IF NOT EXISTS best_step_{_COMPILE} AFTER INSERT ON verdict
WHEN {speedup} IS NOT NULL AND {_is_kernel('NEW', _BACKEND)} AND NOT EXISTS (
    SELECT 1 FROM best_step WHERE metric = '{_COMPILE}' AND speedup >= {speedup}
    AND (evaluated_at, sequence) <= {_PLACE})
BEGIN
    DELETE FROM best_step WHERE metric = '{_COMPILE}' AND speedup <= {speedup}
        AND (evaluated_at, sequence) > {_PLACE};
    INSERT INTO best_step (metric, evaluated_at, sequence, candidate_id, speedup, speedup_to_beat)
        VALUES ('{_COMPILE}', NEW.evaluated_at, {_SEQUENCE}, NEW.candidate_id, {speedup},
                {speedup});
END;
"""


STEP_TABLES = """
CREATE TABLE IF NOT EXISTS best_step (
    metric TEXT NOT NULL,
    evaluated_at REAL NOT NULL,
    sequence INTEGER NOT NULL,
    candidate_id TEXT NOT NULL,
    speedup REAL NOT NULL,
    speedup_to_beat REAL NOT NULL,
    PRIMARY KEY (metric, evaluated_at, sequence)
);
CREATE INDEX IF NOT EXISTS best_step_candidate ON best_step(candidate_id);
CREATE TABLE IF NOT EXISTS best_step_order (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    in_order INTEGER NOT NULL
);
""" + _eager_trigger() + _compile_trigger() + """
CREATE TRIGGER IF NOT EXISTS best_step_delete AFTER DELETE ON verdict
WHEN EXISTS (SELECT 1 FROM best_step WHERE candidate_id = OLD.candidate_id)
BEGIN
    UPDATE best_step_order SET in_order = 0;
    -- Its own steps go at once: the same candidate judged again at the same moment
    -- (a test's clock) would otherwise meet them in the primary key.
    DELETE FROM best_step WHERE candidate_id = OLD.candidate_id;
END;
"""


def has_steps(connection: sqlite3.Connection) -> bool:
    """Whether this database keeps the steps as this version does (an older run does not)."""
    ((found,),) = connection.execute(
        "SELECT COUNT(*) FROM sqlite_master WHERE (type = 'trigger' AND name = 'best_step_delete')"
        " OR (type = 'table' AND name = 'best_step_order')").fetchall()
    return found == 2


def drop_steps(connection: sqlite3.Connection) -> None:
    """Remove the steps an older version kept (its table lacks the bars), before they are made."""
    triggers = connection.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"
                                  " AND name LIKE 'best_step%'").fetchall()
    for (name,) in triggers:
        connection.execute(f"DROP TRIGGER {name}")
    for table in ("best_step", "best_step_order"):
        connection.execute(f"DROP TABLE IF EXISTS {table}")


def steps_in_order(connection: sqlite3.Connection) -> bool:
    """Whether the kept steps hold (no verdict written before a step, no step deleted)."""
    row = connection.execute("SELECT in_order FROM best_step_order WHERE id = 1").fetchone()
    return bool(row and row[0])


def seed_steps(connection: sqlite3.Connection) -> None:
    """Fill the steps from a scan of every verdict: when a database gains them, or lost order."""
    rows = _scanned(connection)
    connection.execute("DELETE FROM best_step")
    connection.execute("INSERT OR REPLACE INTO best_step_order (id, in_order) VALUES (1, 1)")
    connection.executemany(
        "INSERT INTO best_step (metric, evaluated_at, sequence, candidate_id, speedup,"
        " speedup_to_beat) VALUES (?, ?, ?, ?, ?, ?)", rows)


def scan_steps(connection: sqlite3.Connection) -> list[Step]:
    """The steps from the verdicts themselves: the reference `best_step` must match."""
    return [Step(row[0], row[3], row[4], row[1]) for row in _scanned(connection)]


def kept_steps(connection: sqlite3.Connection) -> list[Step]:
    """The steps as the triggers keep them (only when `steps_in_order`)."""
    rows = connection.execute(
        "SELECT metric, candidate_id, speedup, evaluated_at FROM best_step"
        " ORDER BY metric = ?, evaluated_at, sequence", (_COMPILE,))
    return [Step(row[0], row[1], row[2], row[3]) for row in rows]


def read_steps(connection: sqlite3.Connection) -> list[Step]:
    """The steps: kept ones where they hold, else from a scan."""
    return kept_steps(connection) if steps_in_order(connection) else scan_steps(connection)


def best_kernel_id(connection: sqlite3.Connection) -> str | None:
    """The last step against eager: the run's best timed kernel (records.incumbent)."""
    if not steps_in_order(connection):
        eager = [step for step in scan_steps(connection) if step.metric == _EAGER]
        return eager[-1].candidate_id if eager else None
    row = connection.execute(
        "SELECT candidate_id FROM best_step WHERE metric = ?"
        " ORDER BY evaluated_at DESC, sequence DESC LIMIT 1", (_EAGER,)).fetchone()
    return row[0] if row else None


def _scanned(connection: sqlite3.Connection) -> list[tuple[str, float, int, str, float, float]]:
    """Every step as a row of best_step, both metrics, each in the order judged.

    One ordered pass per metric in Python: the chain of intervals is no
    window function, and a trigger cannot run this (it lacks CTEs).
    """
    kernel = _is_kernel("v", "c.backend")
    rows: list[tuple[str, float, int, str, float, float]] = []
    for metric, high in ((_EAGER, "v.speedup_vs_eager_high"), (_COMPILE, "NULL")):
        to_beat = None
        for at, sequence, candidate_id, speedup, speedup_high in connection.execute(
                _TIMED.format(metric=metric, high=high, kernel=kernel)):
            if to_beat is None or speedup > to_beat:
                to_beat = speedup_to_beat(speedup, speedup_high)
                rows.append((metric, at, sequence, candidate_id, speedup, to_beat))
    return rows
