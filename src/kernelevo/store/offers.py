"""The archive's offers, kept by SQLite triggers so a page or a resume reads a few rows.

Rebuilding a run's archive replays its verdicts in the order the search saw
them (evaluated_at, then sequence). Only a verdict fitter than every earlier
one of its cell on its island can become an elite: once a verdict was
offered, the cell's elite is at least that fit or its interval reaches that
far, and neither ever falls. A failure only counts per cell, so the replay
needs those offers (with the high ends of their intervals), the failure
counts and the number of verdicts. Finding them read
every verdict (0.4 s of a 200,000-candidate run's page, most of a resume's
reads); here they are kept as each verdict is written, in its transaction:

- `archive_order` holds how many verdicts were written, the order key of
  the last one, and whether every verdict came after the one before it;
- `archive_offer` holds each offer with its place among the verdicts;
- `archive_failure` counts the failures of each cell of each island.

Verdicts come in order because each one's `evaluated_at` is the moment it
is written. One out of order, or one deleted (a candidate judged again),
leaves places that a scan must find again: the tables then say they are
out of order, readers scan the verdicts (`scan_offers`), and the next
writer to open the run fills them afresh (`seed_offers`), as it does for a
run made before them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# A verdict's archive fitness (archive.fitness_of) and its cell, as the
# search's Archive reads them; failures have no fitness.
FITNESS = "CASE WHEN v.status = 'ok' THEN COALESCE(v.speedup_vs_eager, 1.0) END"
_NEW_FITNESS = "CASE WHEN NEW.status = 'ok' THEN COALESCE(NEW.speedup_vs_eager, 1.0) END"
# The high end of the fitness's interval (archive.fitness_high_of).
FITNESS_HIGH = "CASE WHEN v.status = 'ok' THEN v.speedup_vs_eager_high END"
_NEW_FITNESS_HIGH = "CASE WHEN NEW.status = 'ok' THEN NEW.speedup_vs_eager_high END"
_ISLAND, _CELL = "COALESCE(c.island, 0)", "COALESCE(c.cell_json, '[]')"
# Candidate first, as store_briefs reads verdicts: its covering index, then
# each verdict by id, never a candidate's row (and its source).
_JUDGED = ("candidate c CROSS JOIN verdict v INDEXED BY verdict_figures"
           " ON v.candidate_id = c.id")
_SEQUENCE = "(SELECT sequence FROM candidate WHERE id = NEW.candidate_id)"

OFFER_TABLES = f"""
CREATE TABLE IF NOT EXISTS archive_order (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    additions INTEGER NOT NULL,
    last_at REAL,
    last_sequence INTEGER,
    in_order INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS archive_offer (
    position INTEGER PRIMARY KEY,
    candidate_id TEXT NOT NULL,
    island INTEGER NOT NULL,
    cell_json TEXT NOT NULL,
    fitness REAL NOT NULL,
    speedup_vs_eager_high REAL
);
CREATE INDEX IF NOT EXISTS archive_offer_cell ON archive_offer(island, cell_json, fitness);
CREATE TABLE IF NOT EXISTS archive_failure (
    island INTEGER NOT NULL,
    cell_json TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (island, cell_json)
);
CREATE TRIGGER IF NOT EXISTS archive_offer_insert AFTER INSERT ON verdict
BEGIN
    UPDATE archive_order SET in_order = 0 WHERE last_at IS NOT NULL
        AND (NEW.evaluated_at < last_at
             OR (NEW.evaluated_at = last_at AND {_SEQUENCE} < last_sequence));
    UPDATE archive_order SET additions = additions + 1, last_at = NEW.evaluated_at,
        last_sequence = {_SEQUENCE};
    INSERT INTO archive_failure (island, cell_json, count)
        SELECT {_ISLAND}, {_CELL}, 1 FROM candidate c
        WHERE c.id = NEW.candidate_id AND {_NEW_FITNESS} IS NULL
        ON CONFLICT (island, cell_json) DO UPDATE SET count = count + 1;
    INSERT INTO archive_offer (position, candidate_id, island, cell_json, fitness,
                               speedup_vs_eager_high)
        SELECT (SELECT additions FROM archive_order), c.id, {_ISLAND}, {_CELL}, {_NEW_FITNESS},
               {_NEW_FITNESS_HIGH}
        FROM candidate c WHERE c.id = NEW.candidate_id AND {_NEW_FITNESS} IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM archive_offer o WHERE o.island = {_ISLAND}
                        AND o.cell_json = {_CELL} AND o.fitness >= {_NEW_FITNESS});
END;
CREATE TRIGGER IF NOT EXISTS archive_offer_delete AFTER DELETE ON verdict
BEGIN
    UPDATE archive_order SET in_order = 0;
END;
"""


@dataclass(frozen=True)
class ArchiveOffers:
    """A run's verdicts as its archive replays them (Archive.replay_offers).

    offers: (place from 1, candidate id, cell, island, fitness, the high end of
    its interval or None) in order; failures: (island, cell, count);
    additions: every verdict.
    """

    additions: int
    highest_island: int
    offers: list[tuple[int, str, tuple[Any, ...], int, float, float | None]]
    failures: list[tuple[int, tuple[Any, ...], int]]


def has_offers(connection: sqlite3.Connection) -> bool:
    """Whether this database keeps the offers as this version does (with their high
    ends); a run made before them, or before the high ends, does not yet."""
    if connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'trigger'"
                          " AND name = 'archive_offer_delete'").fetchone() is None:
        return False
    columns = connection.execute("SELECT name FROM pragma_table_info('archive_offer')")
    return "speedup_vs_eager_high" in {row[0] for row in columns}


def drop_offers(connection: sqlite3.Connection) -> None:
    """Remove the offers an older version kept (no high ends), before they are made afresh."""
    for trigger in ("archive_offer_insert", "archive_offer_delete"):
        connection.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for table in ("archive_order", "archive_offer", "archive_failure"):
        connection.execute(f"DROP TABLE IF EXISTS {table}")


def offers_in_order(connection: sqlite3.Connection) -> bool:
    """Whether the kept offers hold: every verdict written after the one before it."""
    row = connection.execute("SELECT in_order FROM archive_order WHERE id = 1").fetchone()
    return bool(row and row[0])


def kept_offers(connection: sqlite3.Connection) -> ArchiveOffers:
    """The offers from the tables the triggers keep (only when `offers_in_order`)."""
    additions = connection.execute(
        "SELECT additions FROM archive_order WHERE id = 1").fetchone()[0]
    offers = [(position, candidate_id, _cell(cell), island, fitness, high)
              for position, candidate_id, island, cell, fitness, high in connection.execute(
                  "SELECT position, candidate_id, island, cell_json, fitness,"
                  " speedup_vs_eager_high FROM archive_offer ORDER BY position")]
    failed = connection.execute("SELECT island, cell_json, count FROM archive_failure").fetchall()
    highest = max([offer[3] for offer in offers]
                  + [island for island, _, _ in failed], default=0)
    return ArchiveOffers(additions, highest, offers, _failures(
        ((island, cell), count) for island, cell, count in failed))


def scan_offers(connection: sqlite3.Connection) -> ArchiveOffers:
    """The offers from the verdicts themselves, in one ordered pass: the kept ones' reference."""
    scan = _Scan(connection)
    return ArchiveOffers(scan.additions, scan.highest_island,
                         [(position, candidate_id, _cell(cell), island, fitness, high)
                          for position, candidate_id, cell, island, fitness, high in scan.offers],
                         _failures(scan.failed.items()))


class _Scan:
    """One ordered pass over the verdicts (a covering index and one sort in SQLite).

    The running best per cell is kept here, cheaper than SQL window functions
    over every row. Cells stay the text the candidate table holds, which is
    what the triggers compare.
    """

    def __init__(self, connection: sqlite3.Connection) -> None:
        rows = connection.execute(
            f"SELECT c.id, {_CELL}, {_ISLAND}, {FITNESS}, {FITNESS_HIGH}, v.evaluated_at,"
            f" c.sequence FROM {_JUDGED} ORDER BY v.evaluated_at, c.sequence")
        best: dict[tuple[int, str], float] = {}
        self.failed: dict[tuple[int, str], int] = {}
        self.offers: list[tuple[int, str, str, int, float, float | None]] = []
        self.highest_island, self.additions, self.last = 0, 0, (None, None)
        for position, (candidate_id, cell, island, fitness, high, at, sequence) in enumerate(
                rows, 1):
            self.additions, self.last = position, (at, sequence)
            self.highest_island = max(self.highest_island, island)
            key = (island, cell)
            if fitness is None:
                self.failed[key] = self.failed.get(key, 0) + 1
                continue
            earlier = best.get(key)
            if earlier is None or fitness > earlier:
                best[key] = fitness
                self.offers.append((position, candidate_id, cell, island, fitness, high))


def seed_offers(connection: sqlite3.Connection) -> None:
    """Fill the offers from a scan of every verdict: when a database gains them, or lost order."""
    scan = _Scan(connection)
    for table in ("archive_order", "archive_offer", "archive_failure"):
        connection.execute(f"DELETE FROM {table}")
    connection.execute(
        "INSERT INTO archive_order (id, additions, last_at, last_sequence, in_order)"
        " VALUES (1, ?, ?, ?, 1)", (scan.additions, *scan.last))
    connection.executemany(
        "INSERT INTO archive_offer (position, candidate_id, cell_json, island, fitness,"
        " speedup_vs_eager_high) VALUES (?, ?, ?, ?, ?, ?)", scan.offers)
    connection.executemany(
        "INSERT INTO archive_failure (island, cell_json, count) VALUES (?, ?, ?)",
        [(island, cell, count) for (island, cell), count in scan.failed.items()])


def _failures(counts: Iterable[tuple[tuple[int, str], int]]) -> list[tuple[int, tuple, int]]:
    # Sorted as the scan sorts them, so both give equal lists (their order
    # changes nothing in a replay).
    return [(island, _cell(cell), count) for (island, cell), count
            in sorted(counts, key=lambda item: (item[1], item[0]))]


def _cell(cell_json: str) -> tuple[Any, ...]:
    return tuple(json.loads(cell_json))
