"""Records read from a run database: small frozen dataclasses, built from rows."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import Verdict


@dataclass(frozen=True)
class RunInfo:
    """The run's own row: what was asked and where it stands."""

    id: str
    created_at: float
    task_name: str
    task_source: str
    config: dict[str, Any]
    status: str
    finished_at: float | None


@dataclass(frozen=True)
class StoredCandidate:
    """A candidate as stored, with its place in the search and its verdict."""

    id: str
    sequence: int
    candidate: Candidate
    inspiration_ids: tuple[str, ...]
    island: int | None
    cell: tuple[Any, ...] | None
    created_at: float
    state: str
    evaluation_attempts: int
    verdict: Verdict | None
    evaluated_at: float | None


@dataclass(frozen=True)
class LlmCall:
    """One request to a model; tokens and cost are zero until it finishes."""

    id: int
    candidate_id: str | None
    model: str
    prompt: Any
    response_text: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_s: float | None
    max_output_tokens: int | None
    cost_bound_usd: float | None
    started_at: float
    finished_at: float | None
    state: str
    error: str | None


@dataclass(frozen=True)
class Event:
    """One timeline entry (progress, budget notices, migrations)."""

    id: int
    at: float
    kind: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Totals:
    """Spend and outcome counts; in-flight calls are bounded, not yet counted."""

    tokens_in: int
    tokens_out: int
    cost_usd: float
    candidates_by_status: dict[str, int]
    llm_calls: int
    llm_calls_in_flight: int = 0
    in_flight_cost_bound_usd: float = 0.0


@dataclass(frozen=True)
class RunSummary:
    """One line of `kernelevo runs`; `problem` is set when the run is unreadable."""

    run_id: str
    path: Path
    task_name: str = ""
    status: str = ""
    created_at: float = 0.0
    finished_at: float | None = None
    candidates: int = 0
    best_speedup_vs_eager: float | None = None
    cost_usd: float = 0.0
    tokens: int = 0
    problem: str = ""




def stored_candidate_from_row(row: sqlite3.Row) -> StoredCandidate:
    """Build from a candidate row LEFT JOINed with its verdict."""
    verdict_json = row["verdict_json"]
    candidate = Candidate(
        source=row["source"],
        backend=row["backend"],
        name=row["name"],
        origin=row["origin"],
        parent_ids=tuple(json.loads(row["parent_ids_json"])),
    )
    return StoredCandidate(
        id=row["id"],
        sequence=row["sequence"],
        candidate=candidate,
        inspiration_ids=tuple(json.loads(row["inspiration_ids_json"])),
        island=row["island"],
        cell=None if row["cell_json"] is None else tuple(json.loads(row["cell_json"])),
        created_at=row["created_at"],
        state=row["state"],
        evaluation_attempts=row["evaluation_attempts"],
        verdict=Verdict.from_dict(json.loads(verdict_json)) if verdict_json else None,
        evaluated_at=row["evaluated_at"],
    )


def llm_call_from_row(row: sqlite3.Row) -> LlmCall:
    fields = {key: row[key] for key in row.keys() if key != "prompt_json"}
    return LlmCall(prompt=json.loads(row["prompt_json"]), **fields)


def run_info_from_row(row: sqlite3.Row) -> RunInfo:
    return RunInfo(
        id=row["id"],
        created_at=row["created_at"],
        task_name=row["task_name"],
        task_source=row["task_source"],
        config=json.loads(row["config_json"]),
        status=row["status"],
        finished_at=row["finished_at"],
    )


def event_from_row(row: sqlite3.Row) -> Event:
    payload = json.loads(row["payload_json"])
    return Event(id=row["id"], at=row["at"], kind=row["kind"], payload=payload)
