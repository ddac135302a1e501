"""Records read from a run database: small frozen dataclasses, built from rows."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kernelevo.candidate import KERNEL_BACKENDS, Candidate
from kernelevo.evaluate.verdict import NO_CUSTOM_KERNEL_FLAG, Verdict

# A "pytorch" candidate (the reference seed) runs PyTorch's kernels, so it is
# the baseline, never a result: only KERNEL_BACKENDS' candidates are kernels.
BASELINE_BACKEND = "pytorch"


def is_kernel(status: str | None, backend: str, flags: tuple[str, ...]) -> bool:
    """The one rule for a custom kernel: passed, of a custom backend, not flagged as
    running PyTorch only (the flag Verdict.passed_kernel reads, so `eval` and runs agree).

    `kernel_sql` is this rule in SQL; tests hold the two equal on a table of cases.
    """
    return status == "ok" and backend in KERNEL_BACKENDS and NO_CUSTOM_KERNEL_FLAG not in flags


def speedup_to_beat(speedup: float, high: float | None) -> float:
    """What a rival's speedup must exceed to count as faster: the high end of this
    speedup's interval (what a rerun can show), the speedup itself without one."""
    return speedup if high is None or high < speedup else high


# The verdicts that carry the flag. The `instr` test is the WHERE of the partial
# index store/tables.INDEXES["verdict_flagged"], written out the same so SQLite
# uses it: the few verdicts that name the flag are found without reading the
# others' JSON. json_each then tells a flag from the word elsewhere (a log).
FLAGGED_VERDICTS = (
    f"SELECT candidate_id FROM verdict WHERE instr(verdict_json, '{NO_CUSTOM_KERNEL_FLAG}') > 0"
    f" AND EXISTS (SELECT 1 FROM json_each(verdict_json, '$.flags')"
    f" WHERE value = '{NO_CUSTOM_KERNEL_FLAG}')")


# Candidates of a backend that is not a kernel's (the PyTorch seed, a few
# others): the WHERE of the partial index store/tables.INDEXES["candidate_other"],
# written out the same so SQLite uses it.
OTHER_BACKEND_SQL = "backend NOT IN ({})".format(", ".join(f"'{b}'" for b in KERNEL_BACKENDS))


def kernel_sql(status: str, backend: str, candidate_id: str) -> str:
    """`is_kernel` as an SQL condition over these column expressions (literals inlined:
    triggers take no parameters)."""
    backends = ", ".join(f"'{name}'" for name in KERNEL_BACKENDS)
    return (f"({status} = 'ok' AND {backend} IN ({backends})"
            f" AND {candidate_id} NOT IN ({FLAGGED_VERDICTS}))")


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
    # The high end of the verdict's speedup interval as stored when it was
    # written, which the search compared with: None for a verdict stored before
    # intervals were, even if its JSON holds one (store/tables.LATER_COLUMNS).
    speedup_vs_eager_high: float | None = None


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
    # The part of tokens_in + tokens_out and cost_usd that is an estimate, not
    # billed: calls cut off after sending (charged their worst case) and
    # answers whose usage was implausible or missing (llm/charges.py).
    estimated_tokens: int = 0
    estimated_usd: float = 0.0

    @property
    def billed_tokens(self) -> int:
        """Tokens as the servers reported them."""
        return self.tokens_in + self.tokens_out - self.estimated_tokens


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
    best_id: str | None = None
    cost_usd: float = 0.0
    tokens: int = 0
    problem: str = ""
    estimated_tokens: int = 0  # of `tokens`, charged as worst cases or guesses, not billed


# Slots: a run holds one per candidate while a page of it is drawn (50,000 and more).
@dataclass(frozen=True, slots=True)
class RankEntry:
    """What the best-kernel rule reads of one candidate; status None: not judged yet."""

    id: str
    sequence: int
    backend: str
    origin: str
    status: str | None
    flags: tuple[str, ...]
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    evaluated_at: float | None
    # The high end of speedup_vs_eager's interval (Verdict.speedup_vs_eager_high).
    speedup_vs_eager_high: float | None = field(default=None, kw_only=True)

    @classmethod
    def of(cls, stored: StoredCandidate) -> RankEntry:
        verdict = stored.verdict
        return cls(id=stored.id, sequence=stored.sequence, backend=stored.candidate.backend,
                   origin=stored.candidate.origin, status=verdict.status if verdict else None,
                   flags=verdict.flags if verdict else (),
                   speedup_vs_eager=verdict.speedup_vs_eager if verdict else None,
                   speedup_vs_compile=verdict.speedup_vs_compile if verdict else None,
                   evaluated_at=stored.evaluated_at,
                   speedup_vs_eager_high=stored.speedup_vs_eager_high)

    @property
    def is_kernel(self) -> bool:
        """Passed, of a custom backend, and not flagged as running PyTorch only (is_kernel)."""
        return is_kernel(self.status, self.backend, self.flags)


@dataclass(frozen=True, slots=True)
class CandidateBrief(RankEntry):
    """A candidate without its source, and its verdict's figures without the verdict's JSON.

    What table rows, plots, the archive replay and the best-kernel rule read
    (`flags` is read only where the verdict names NO_CUSTOM_KERNEL_FLAG).
    """

    name: str
    parent_ids: tuple[str, ...]
    island: int | None
    cell: tuple[Any, ...] | None
    created_at: float
    state: str
    reason: str | None
    runtime_ms: float | None


class Judged(NamedTuple):
    """One verdict as the archive and the best-so-far lines replay it (a tuple: a run
    holds one per verdict); `kernel` is RankEntry.is_kernel."""

    id: str
    cell: tuple[Any, ...]
    island: int | None
    status: str
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    evaluated_at: float
    kernel: bool
    speedup_vs_eager_high: float | None = None


@dataclass(frozen=True)
class Ranking:
    """A run's passing custom kernels, best first, and its PyTorch baseline, kept apart."""

    # The best first (`incumbent`), then the rest fastest first; the first few
    # only where read with a limit.
    kernels: tuple[RankEntry, ...]
    baseline: RankEntry | None
    judged: int  # candidates with a verdict, the baseline aside
    failed: int  # judged and not ok
    not_kernels: int  # ok but PyTorch only
    pending: int  # not judged yet

    @property
    def passing(self) -> int:
        """Passing custom kernels, all of them (`kernels` may hold only the first few)."""
        return self.judged - self.failed - self.not_kernels

    @property
    def best(self) -> RankEntry | None:
        return self.kernels[0] if self.kernels else None

    @property
    def timed(self) -> bool:
        """Whether the best was chosen by its speedup; False on runs without a GPU."""
        return self.best is not None and self.best.speedup_vs_eager is not None

    def no_best_message(self) -> str:
        """Why there is no best yet: how the candidates other than the baseline fared."""
        counts = [f"{self.failed} of {self.judged} judged candidates failed"]
        if self.not_kernels:
            counts.append(f"{self.not_kernels} passed without a custom kernel")
        if self.pending:
            counts.append(f"{self.pending} not judged yet")
        return "no passing custom kernel yet: " + ", ".join(counts)

    def baseline_text(self) -> str:
        """The baseline and its verdict in one phrase, as every view shows it."""
        return baseline_text(self.baseline)


def baseline_text(baseline: RankEntry | None) -> str:
    """The PyTorch baseline and its verdict in one phrase, as every view shows it."""
    if baseline is None:
        return "none (no PyTorch candidate in this run)"
    state = baseline.status or "not judged yet"
    if baseline.speedup_vs_eager is not None:
        state += f", {baseline.speedup_vs_eager:.2f}x vs eager"
    return f"{baseline.id} (PyTorch {baseline.origin}): {state}"


def rank(entries: Iterable[RankEntry]) -> Ranking:
    """The one rule for "best" that `show`, `export --best`, reports, the UI and evolve use.

    The PyTorch baseline is set apart; of the passing custom kernels, the
    timed one that `incumbent` names leads, then the rest fastest against
    eager first. Without timings (no GPU) every kernel scores alike, so the
    first judged leads: the same one on every reading of the run.
    """
    everything = sorted(entries, key=lambda entry: entry.sequence)
    pytorch = [e for e in everything if e.backend == BASELINE_BACKEND]
    baseline = min(pytorch, key=lambda e: (e.origin != "seed", e.sequence), default=None)
    judged = [e for e in everything if e is not baseline and e.status is not None]
    kernels = sorted((e for e in judged if e.is_kernel), key=_rank_key)
    leader = incumbent(kernels)
    if leader is not None:
        kernels = [leader, *(e for e in kernels if e is not leader)]
    failed = sum(1 for e in judged if e.status != "ok")
    return Ranking(kernels=tuple(kernels), baseline=baseline, judged=len(judged), failed=failed,
                   not_kernels=len(judged) - failed - len(kernels),
                   pending=len(everything) - len(judged) - (baseline is not None))


def incumbent(kernels: Iterable[RankEntry]) -> RankEntry | None:
    """The best timed kernel: in the order judged, each takes the lead only with a
    speedup above the leader's `speedup_to_beat`, so noise cannot move the best.

    What the best-so-far steps of speedup_vs_eager keep (store_steps): the
    last step is this kernel.
    """
    leader, to_beat = None, -math.inf
    for entry in sorted(kernels, key=_judged_order):
        speedup = entry.speedup_vs_eager
        if speedup is not None and speedup > to_beat:
            leader, to_beat = entry, speedup_to_beat(speedup, entry.speedup_vs_eager_high)
    return leader


def _judged_order(entry: RankEntry) -> tuple[float, int]:
    return (entry.evaluated_at if entry.evaluated_at is not None else math.inf, entry.sequence)


def rank_candidates(candidates: Iterable[StoredCandidate]) -> Ranking:
    """`rank` over candidates already read in full (show, export, the report)."""
    return rank(RankEntry.of(stored) for stored in candidates)


# `_rank_key` in SQL over a verdict `v` and its candidate `c`, as two parts read
# in turn: the timed kernels, then the untimed. Apart, each part's order is
# the verdict_best index's, so SQLite stops at a limit instead of sorting all.
RANK_ORDER_SQL = (("v.speedup_vs_eager IS NOT NULL", "v.speedup_vs_eager DESC, v.evaluated_at,"
                   " c.sequence"),
                  ("v.speedup_vs_eager IS NULL", "v.evaluated_at, c.sequence"))


def _rank_key(entry: RankEntry) -> tuple[bool, float, float, int]:
    judged_at = entry.evaluated_at if entry.evaluated_at is not None else math.inf
    return (entry.speedup_vs_eager is None, -(entry.speedup_vs_eager or 0.0), judged_at,
            entry.sequence)


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
        speedup_vs_eager_high=row["speedup_vs_eager_high"],
    )


def llm_call_from_row(row: sqlite3.Row) -> LlmCall:
    fields = {key: row[key] for key in row.keys() if key != "prompt_json"}
    return LlmCall(prompt=json.loads(row["prompt_json"]), **fields)


# Outcomes of a search (search.outcome.OUTCOME_STATUSES) that a finished run shows as
# its status: it stopped without doing what it was asked.
FAILED_OUTCOMES = ("llm_failed", "error")


def run_info_from_row(row: sqlite3.Row) -> RunInfo:
    """From the run's row and, as `outcome`, the status of its last stop event."""
    status, outcome = row["status"], row["outcome"]
    return RunInfo(
        id=row["id"],
        created_at=row["created_at"],
        task_name=row["task_name"],
        task_source=row["task_source"],
        config=json.loads(row["config_json"]),
        status=outcome if status == "finished" and outcome in FAILED_OUTCOMES else status,
        finished_at=row["finished_at"],
    )


def rank_entry_from_row(row: sqlite3.Row) -> RankEntry:
    """From RunStore.ranking's light query; `flagged_json` is set only when it names the flag."""
    flagged = json.loads(row["flagged_json"]) if row["flagged_json"] else {}
    return RankEntry(id=row["id"], sequence=row["sequence"], backend=row["backend"],
                     origin=row["origin"], status=row["status"],
                     flags=tuple(flagged.get("flags", ())),
                     speedup_vs_eager=row["speedup_vs_eager"],
                     speedup_vs_compile=row["speedup_vs_compile"],
                     evaluated_at=row["evaluated_at"],
                     speedup_vs_eager_high=row["speedup_vs_eager_high"])


def event_from_row(row: sqlite3.Row) -> Event:
    payload = json.loads(row["payload_json"])
    return Event(id=row["id"], at=row["at"], kind=row["kind"], payload=payload)
