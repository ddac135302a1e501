"""Best-so-far steps of a run, kept by SQLite triggers so a page reads a few rows.

The report's and the UI's best-so-far lines step up where a passing custom
kernel beats every kernel judged before it (in the order judged: time, then
creation). Finding those steps replayed every verdict (0.4 s at 50,000
candidates, on every page), so the steps live in `best_step`, updated in the
same transaction as each verdict, like the tallies of store_tally.

A new verdict is a step exactly when no step at or before its place in the
order is as fast, and it ends every later step it is at least as fast as; no
other verdict changes. Deleting a step's verdict (a candidate judged again)
can raise later verdicts to steps, so that rare case rebuilds the table from
a scan. A run made before this table gains it, filled by the same scan, the
first time it is opened (store_schema.ensure_schema).
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from kernelevo.store.records import kernel_sql
from kernelevo.store.tally import statements

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


def _scan(metric: str) -> str:
    """Every step of `metric` from the verdicts themselves: a running maximum."""
    return (
        f"SELECT '{metric}', evaluated_at, sequence, id, speedup FROM ("
        f" SELECT v.evaluated_at, c.sequence, c.id, v.{metric} AS speedup,"
        f" MAX(v.{metric}) OVER (ORDER BY v.evaluated_at, c.sequence"
        " ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS earlier"
        " FROM candidate c JOIN verdict v ON v.candidate_id = c.id"
        f" WHERE v.{metric} IS NOT NULL AND {_is_kernel('v', 'c.backend')})"
        " WHERE earlier IS NULL OR speedup > earlier")


_SEED = "DELETE FROM best_step;\n" + "".join(
    f"INSERT INTO best_step (metric, evaluated_at, sequence, candidate_id, speedup)"
    f" {_scan(metric)};\n" for metric in METRICS)


def _insert_trigger(metric: str) -> str:
    sequence = "(SELECT sequence FROM candidate WHERE id = NEW.candidate_id)"
    backend = "(SELECT backend FROM candidate WHERE id = NEW.candidate_id)"
    place = f"(NEW.evaluated_at, {sequence})"
    return f"""
CREATE TRIGGER IF NOT EXISTS best_step_{metric} AFTER INSERT ON verdict
WHEN NEW.{metric} IS NOT NULL AND {_is_kernel('NEW', backend)} AND NOT EXISTS (
    SELECT 1 FROM best_step WHERE metric = '{metric}' AND speedup >= NEW.{metric}
    AND (evaluated_at, sequence) <= {place})
BEGIN
    DELETE FROM best_step WHERE metric = '{metric}' AND speedup <= NEW.{metric}
        AND (evaluated_at, sequence) > {place};
    INSERT INTO best_step (metric, evaluated_at, sequence, candidate_id, speedup)
        VALUES ('{metric}', NEW.evaluated_at, {sequence}, NEW.candidate_id, NEW.{metric});
END;
"""


STEP_TABLES = """
CREATE TABLE IF NOT EXISTS best_step (
    metric TEXT NOT NULL,
    evaluated_at REAL NOT NULL,
    sequence INTEGER NOT NULL,
    candidate_id TEXT NOT NULL,
    speedup REAL NOT NULL,
    PRIMARY KEY (metric, evaluated_at, sequence)
);
CREATE INDEX IF NOT EXISTS best_step_candidate ON best_step(candidate_id);
""" + "".join(_insert_trigger(metric) for metric in METRICS) + f"""
CREATE TRIGGER IF NOT EXISTS best_step_delete AFTER DELETE ON verdict
WHEN EXISTS (SELECT 1 FROM best_step WHERE candidate_id = OLD.candidate_id)
BEGIN
{_SEED}END;
"""


def has_steps(connection: sqlite3.Connection) -> bool:
    """Whether this database keeps the steps (a run made before them does not yet)."""
    return connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'trigger'"
                              " AND name = 'best_step_delete'").fetchone() is not None


def seed_steps(connection: sqlite3.Connection) -> None:
    """Fill the steps from a scan of every verdict; once, when a database gains them."""
    for statement in statements(_SEED):
        connection.execute(statement)


def scan_steps(connection: sqlite3.Connection) -> list[Step]:
    """The steps from the verdicts themselves: the reference `best_step` must match."""
    rows = connection.execute(
        " UNION ALL ".join(_scan(metric) for metric in METRICS)).fetchall()
    rows.sort(key=lambda row: (METRICS.index(row[0]), row[1], row[2]))
    return [Step(row[0], row[3], row[4], row[1]) for row in rows]
