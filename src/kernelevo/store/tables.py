"""The run store's tables and indexes, the schema version, and the columns added after a table was made.

Definitions only: schema.py connects and opens, migrate.py brings an older
file up to date. store_readonly reads an older file through views of them.
"""

from __future__ import annotations

from kernelevo.candidate import ORIGINS
from kernelevo.store.records import OTHER_BACKEND_SQL

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
INDEXES_OF_LATER_COLUMNS = ("verdict_figures",)

