"""Running totals of a run, kept by SQLite triggers so reading them costs O(1).

The live progress tick asks for the totals five times a second. Summing the
`llm_call` table each time walks every row's prompt and reply (316 ms at
50,000 candidates, longer than the tick), so the sums live in two small
tables that triggers update in the same transaction as each write. Every
process that writes through any connection keeps them right, and a reader
(the UI, `kernelevo runs`) sees them as consistent as the rows themselves.

Verdicts are replaced by DELETE then INSERT, never `INSERT OR REPLACE`:
SQLite fires no delete trigger for a REPLACE unless `recursive_triggers` is
on, which would leave the old verdict's status counted.
"""

from __future__ import annotations

import sqlite3

from kernelevo.store.records import Totals

# Floating sums drift by ulps as bounds are added and taken away again;
# dollars are shown to the cent, so round far below that.
_USD_DIGITS = 12

TALLY_TABLES = """
CREATE TABLE IF NOT EXISTS llm_call_tally (
    state TEXT PRIMARY KEY,
    calls INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    cost_bound_usd REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS candidate_tally (
    status TEXT PRIMARY KEY,
    count INTEGER NOT NULL DEFAULT 0
);
CREATE TRIGGER IF NOT EXISTS llm_call_tally_insert AFTER INSERT ON llm_call BEGIN
    INSERT OR IGNORE INTO llm_call_tally (state) VALUES (NEW.state);
    UPDATE llm_call_tally SET calls = calls + 1,
        input_tokens = input_tokens + NEW.input_tokens,
        output_tokens = output_tokens + NEW.output_tokens,
        cost_usd = cost_usd + NEW.cost_usd,
        cost_bound_usd = cost_bound_usd + COALESCE(NEW.cost_bound_usd, 0)
        WHERE state = NEW.state;
END;
CREATE TRIGGER IF NOT EXISTS llm_call_tally_update
AFTER UPDATE OF state, input_tokens, output_tokens, cost_usd, cost_bound_usd ON llm_call BEGIN
    UPDATE llm_call_tally SET calls = calls - 1,
        input_tokens = input_tokens - OLD.input_tokens,
        output_tokens = output_tokens - OLD.output_tokens,
        cost_usd = cost_usd - OLD.cost_usd,
        cost_bound_usd = cost_bound_usd - COALESCE(OLD.cost_bound_usd, 0)
        WHERE state = OLD.state;
    INSERT OR IGNORE INTO llm_call_tally (state) VALUES (NEW.state);
    UPDATE llm_call_tally SET calls = calls + 1,
        input_tokens = input_tokens + NEW.input_tokens,
        output_tokens = output_tokens + NEW.output_tokens,
        cost_usd = cost_usd + NEW.cost_usd,
        cost_bound_usd = cost_bound_usd + COALESCE(NEW.cost_bound_usd, 0)
        WHERE state = NEW.state;
END;
CREATE TRIGGER IF NOT EXISTS llm_call_tally_delete AFTER DELETE ON llm_call BEGIN
    UPDATE llm_call_tally SET calls = calls - 1,
        input_tokens = input_tokens - OLD.input_tokens,
        output_tokens = output_tokens - OLD.output_tokens,
        cost_usd = cost_usd - OLD.cost_usd,
        cost_bound_usd = cost_bound_usd - COALESCE(OLD.cost_bound_usd, 0)
        WHERE state = OLD.state;
END;
CREATE TRIGGER IF NOT EXISTS candidate_tally_insert AFTER INSERT ON candidate BEGIN
    INSERT OR IGNORE INTO candidate_tally (status) VALUES ('unevaluated');
    UPDATE candidate_tally SET count = count + 1 WHERE status = 'unevaluated';
END;
CREATE TRIGGER IF NOT EXISTS candidate_tally_delete AFTER DELETE ON candidate BEGIN
    UPDATE candidate_tally SET count = count - 1 WHERE status = 'unevaluated';
END;
CREATE TRIGGER IF NOT EXISTS verdict_tally_insert AFTER INSERT ON verdict BEGIN
    UPDATE candidate_tally SET count = count - 1 WHERE status = 'unevaluated';
    INSERT OR IGNORE INTO candidate_tally (status) VALUES (NEW.status);
    UPDATE candidate_tally SET count = count + 1 WHERE status = NEW.status;
END;
CREATE TRIGGER IF NOT EXISTS verdict_tally_update AFTER UPDATE OF status ON verdict BEGIN
    UPDATE candidate_tally SET count = count - 1 WHERE status = OLD.status;
    INSERT OR IGNORE INTO candidate_tally (status) VALUES (NEW.status);
    UPDATE candidate_tally SET count = count + 1 WHERE status = NEW.status;
END;
CREATE TRIGGER IF NOT EXISTS verdict_tally_delete AFTER DELETE ON verdict BEGIN
    UPDATE candidate_tally SET count = count - 1 WHERE status = OLD.status;
    INSERT OR IGNORE INTO candidate_tally (status) VALUES ('unevaluated');
    UPDATE candidate_tally SET count = count + 1 WHERE status = 'unevaluated';
END;
"""

_SEED = """
DELETE FROM llm_call_tally;
DELETE FROM candidate_tally;
INSERT INTO llm_call_tally (state, calls, input_tokens, output_tokens, cost_usd, cost_bound_usd)
    SELECT state, COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cost_usd),
    COALESCE(SUM(cost_bound_usd), 0) FROM llm_call GROUP BY state;
INSERT INTO candidate_tally (status, count)
    SELECT COALESCE(v.status, 'unevaluated'), COUNT(*) FROM candidate c
    LEFT JOIN verdict v ON v.candidate_id = c.id GROUP BY 1;
"""


def seed_tallies(connection: sqlite3.Connection) -> None:
    """Fill the tallies from a full scan; once, when a database gains them."""
    for statement in statements(_SEED):
        connection.execute(statement)


def read_totals(connection: sqlite3.Connection) -> Totals:
    """The run's totals from the tallies (a handful of rows, whatever the run's size)."""
    by_state = {
        row[0]: row[1:]
        for row in connection.execute(
            "SELECT state, calls, input_tokens, output_tokens, cost_usd, cost_bound_usd"
            " FROM llm_call_tally"
        )
    }
    statuses = connection.execute(
        "SELECT status, count FROM candidate_tally WHERE count != 0 ORDER BY status"
    ).fetchall()
    started = by_state.get("started", (0, 0, 0, 0.0, 0.0))
    failed = by_state.get("failed", (0, 0, 0, 0.0, 0.0))
    noted = connection.execute(_NOTED_SUMS.format(index="INDEXED BY llm_call_estimated")
                               ).fetchone()
    billed = connection.execute(_BILLED_FAILURE_SUMS.format(
        index="INDEXED BY llm_call_billed_failure")).fetchone()
    return Totals(
        tokens_in=sum(row[1] for row in by_state.values()),
        tokens_out=sum(row[2] for row in by_state.values()),
        cost_usd=round(float(sum(row[3] for row in by_state.values())), _USD_DIGITS),
        candidates_by_status={status: count for status, count in statuses},
        llm_calls=sum(row[0] for row in by_state.values()),
        llm_calls_in_flight=started[0],
        in_flight_cost_bound_usd=round(float(started[4]), _USD_DIGITS),
        # A failed call carries tokens when charged its worst case (an estimate),
        # or when the server answered unusably and reported what it billed.
        estimated_tokens=failed[1] + failed[2] - billed[0] + noted[0],
        estimated_usd=round(float(failed[3] - billed[1] + noted[1]), _USD_DIGITS),
    )


# Finished calls whose charge is an estimate: their `error` holds the note.
_NOTED_SUMS = ("SELECT COALESCE(SUM(input_tokens + output_tokens), 0), COALESCE(SUM(cost_usd), 0)"
               " FROM llm_call {index} WHERE state = 'finished' AND error IS NOT NULL")
# Failed calls the server answered (an empty answer): their tokens are billed usage.
_BILLED_FAILURE_SUMS = ("SELECT COALESCE(SUM(input_tokens + output_tokens), 0),"
                        " COALESCE(SUM(cost_usd), 0) FROM llm_call {index}"
                        " WHERE state = 'failed' AND response_text IS NOT NULL")


_ESTIMATED = ("(state = 'failed' AND response_text IS NULL)"
              " OR (state = 'finished' AND error IS NOT NULL)")


def scan_totals(connection: sqlite3.Connection) -> Totals:
    """The same totals by a full scan: the reference the tallies must match."""
    calls = connection.execute(
        "SELECT COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),"
        " COALESCE(SUM(cost_usd), 0), COUNT(*), COALESCE(SUM(state = 'started'), 0),"
        " COALESCE(SUM(CASE WHEN state = 'started' THEN cost_bound_usd END), 0),"
        f" COALESCE(SUM(CASE WHEN {_ESTIMATED} THEN input_tokens + output_tokens END), 0),"
        f" COALESCE(SUM(CASE WHEN {_ESTIMATED} THEN cost_usd END), 0)"
        " FROM llm_call"
    ).fetchone()
    statuses = connection.execute(
        "SELECT COALESCE(v.status, 'unevaluated'), COUNT(*) FROM candidate c"
        " LEFT JOIN verdict v ON v.candidate_id = c.id GROUP BY 1"
    ).fetchall()
    return Totals(
        tokens_in=calls[0],
        tokens_out=calls[1],
        cost_usd=float(calls[2]),
        candidates_by_status={status: count for status, count in statuses},
        llm_calls=calls[3],
        llm_calls_in_flight=calls[4],
        in_flight_cost_bound_usd=float(calls[5]),
        estimated_tokens=calls[6],
        estimated_usd=float(calls[7]),
    )


def statements(script: str) -> list[str]:
    """Split a script into whole statements; a trigger body holds several `;`."""
    found, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            found.append(pending.strip())
            pending = ""
    return found
