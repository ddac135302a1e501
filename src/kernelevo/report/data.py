"""A stored run read into plain data: rows, best-so-far series, status counts, cells.

Everything the report and the web UI draw comes from here, read in one pass
over the run store, so the two never disagree. Times are seconds since the
run was created (wall time, including any pause before a resume); spend at a
moment counts the LLM calls finished by then.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelevo.report.lineage import IslandCells, LineageStep, archive_cells, lineage
from kernelevo.run_lock import status_now
from kernelevo.store import DB_NAME, LlmCall, Ranking, RunStore, StoredCandidate, rank_candidates

METRICS = ("speedup_vs_eager", "speedup_vs_compile")
BASELINES = {"speedup_vs_eager": "eager", "speedup_vs_compile": "compile"}
PENDING = "pending"


@dataclass(frozen=True)
class CandidateRow:
    """One candidate as a table row; times in seconds since the run began."""

    id: str
    name: str
    origin: str
    backend: str
    parent_id: str | None
    island: int | None
    status: str
    reason: str
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    runtime_ms: float | None
    created_s: float
    evaluated_s: float | None
    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class Improvement:
    """A new best-so-far speedup, and what had been spent when it was judged."""

    candidate_id: str
    metric: str
    speedup: float
    elapsed_s: float
    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class ModelUsage:
    model: str
    calls: int
    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class BestKernel:
    """The run's best kernel (see store_records.rank); `timed` is False without a GPU."""

    stored: StoredCandidate
    parent: StoredCandidate | None
    reference_source: str
    timed: bool
    spreads: dict[str, tuple[float, float]]  # metric -> (low, high) speedup


@dataclass(frozen=True)
class RunData:
    """Everything shown about one run."""

    run_id: str
    task_name: str
    status: str
    backend: str
    created_at: float
    finished_at: float | None
    elapsed_s: float
    span_s: float  # from creation to the last recorded activity
    tokens: int
    cost_usd: float
    budget: dict[str, Any]
    models: tuple[ModelUsage, ...]
    environment: dict[str, str]
    stop_reason: str
    migrations: int
    candidates: tuple[CandidateRow, ...]
    improvements: tuple[Improvement, ...]
    timeline: tuple[tuple[float, dict[str, int]], ...]  # (seconds, count per status)
    islands: tuple[IslandCells, ...]
    lineage: tuple[LineageStep, ...]
    best: BestKernel | None
    baseline: StoredCandidate | None  # the PyTorch reference: shown apart, never the best
    baseline_text: str
    no_best_message: str  # why there is no best; "" when there is one
    llm_calls: int

    def by_status(self) -> dict[str, int]:
        return dict(self.timeline[-1][1]) if self.timeline else {}

    def improvements_of(self, metric: str) -> tuple[Improvement, ...]:
        return tuple(step for step in self.improvements if step.metric == metric)

    def best_speedup(self, metric: str) -> float | None:
        """The best kernel's own speedup, so both tiles speak of one candidate."""
        verdict = self.best.stored.verdict if self.best else None
        return getattr(verdict, metric) if verdict else None


def run_database(run_path: Path) -> Path:
    """The run.db of a run folder, or the path itself when it is the database."""
    return run_path / DB_NAME if run_path.is_dir() else run_path


def load_run(run_path: Path) -> RunData:
    """Read a run (its folder or its run.db) into RunData."""
    with RunStore.open(run_database(Path(run_path))) as store:
        info, totals = store.run_info(), store.totals()
        stored, calls, events = store.candidates(), store.llm_calls(), store.events()
    ranking = rank_candidates(stored)
    start = info.created_at
    spend = _Spend(calls)
    by_id = {c.id: c for c in stored}
    modes = {call.candidate_id: call_mode(call) for call in calls if call.candidate_id}
    calls_by_candidate: dict[str, list[LlmCall]] = {}
    for call in calls:
        calls_by_candidate.setdefault(call.candidate_id or "", []).append(call)
    best = _best_kernel(ranking, by_id, info.task_source)
    elapsed_events = [e.payload.get("elapsed_s", 0.0) for e in events if e.kind == "elapsed"]
    stops = [e.payload.get("reason", "") for e in events if e.kind == "stop"]
    span = max([start] + [e.at for e in events] + [c.created_at for c in stored]
               + [c.evaluated_at or 0.0 for c in stored] + [info.finished_at or 0.0]) - start
    return RunData(
        run_id=info.id, task_name=info.task_name,
        status=status_now(info.status, run_database(Path(run_path)).parent),
        backend=str(info.config.get("search", {}).get("backend", "")),
        created_at=start, finished_at=info.finished_at,
        elapsed_s=max(elapsed_events, default=span), span_s=span,
        tokens=totals.tokens_in + totals.tokens_out, cost_usd=totals.cost_usd,
        budget=dict(info.config.get("budget") or {}), models=_models(info.config, calls),
        environment=_environment(stored, best), stop_reason=stops[-1] if stops else "",
        migrations=sum(1 for e in events if e.kind == "migration"),
        candidates=tuple(_row(c, start, calls_by_candidate.get(c.id, [])) for c in stored),
        improvements=_improvements(stored, ranking, start, spend),
        timeline=_timeline(stored, start),
        islands=archive_cells(stored, info.config.get("search") or {}),
        lineage=lineage(by_id, best.stored.id, modes) if best else (),
        best=best, baseline=by_id[ranking.baseline.id] if ranking.baseline else None,
        baseline_text=ranking.baseline_text(),
        no_best_message="" if best else ranking.no_best_message(), llm_calls=len(calls))


class _Spend:
    """Tokens and dollars spent by a moment, from finished calls' prefix sums."""

    def __init__(self, calls: list[LlmCall]) -> None:
        done = sorted((c for c in calls if c.finished_at is not None),
                      key=lambda call: call.finished_at or 0.0)
        self.times = [call.finished_at or 0.0 for call in done]
        self.tokens, self.costs = [0], [0.0]
        for call in done:
            self.tokens.append(self.tokens[-1] + call.input_tokens + call.output_tokens)
            self.costs.append(self.costs[-1] + call.cost_usd)

    def at(self, moment: float) -> tuple[int, float]:
        index = bisect.bisect_right(self.times, moment)
        return self.tokens[index], self.costs[index]


def _improvements(stored: list[StoredCandidate], ranking: Ranking, start: float,
                  spend: _Spend) -> tuple[Improvement, ...]:
    """Best-so-far steps of the passing kernels only: the baseline is never a best."""
    kernel_ids = {entry.id for entry in ranking.kernels}
    judged = sorted((c for c in stored if c.id in kernel_ids),
                    key=lambda c: (c.evaluated_at or 0.0, c.sequence))
    steps: list[Improvement] = []
    for metric in METRICS:
        best: float | None = None
        for candidate in judged:
            value = getattr(candidate.verdict, metric)
            if value is None or (best is not None and value <= best):
                continue
            best = value
            moment = candidate.evaluated_at or start
            tokens, cost = spend.at(moment)
            steps.append(Improvement(candidate.id, metric, value, moment - start, tokens, cost))
    return tuple(steps)


def _timeline(stored: list[StoredCandidate],
              start: float) -> tuple[tuple[float, dict[str, int]], ...]:
    """Counts per status after every creation and verdict; unjudged ones are 'pending'."""
    changes: list[tuple[float, str, int]] = []
    for candidate in stored:
        changes.append((candidate.created_at, PENDING, 1))
        if candidate.verdict is not None:
            judged_at = candidate.evaluated_at or candidate.created_at
            changes += [(judged_at, PENDING, -1), (judged_at, candidate.verdict.status, 1)]
    counts: dict[str, int] = {}
    timeline: list[tuple[float, dict[str, int]]] = []
    for moment, status, delta in sorted(changes, key=lambda change: change[0]):
        counts[status] = counts.get(status, 0) + delta
        snapshot = {name: count for name, count in counts.items() if count}
        if timeline and timeline[-1][0] == moment - start:
            timeline[-1] = (moment - start, snapshot)
        else:
            timeline.append((moment - start, snapshot))
    return tuple(timeline)


def _row(stored: StoredCandidate, start: float, own: list[LlmCall]) -> CandidateRow:
    verdict = stored.verdict
    timing = verdict.timings.get("candidate") if verdict else None
    return CandidateRow(
        id=stored.id, name=stored.candidate.name, origin=stored.candidate.origin,
        backend=stored.candidate.backend,
        parent_id=stored.candidate.parent_ids[0] if stored.candidate.parent_ids else None,
        island=stored.island, status=verdict.status if verdict else PENDING,
        reason=verdict.reason if verdict else stored.state,
        speedup_vs_eager=verdict.speedup_vs_eager if verdict else None,
        speedup_vs_compile=verdict.speedup_vs_compile if verdict else None,
        runtime_ms=timing.median_ms if timing else None,
        created_s=stored.created_at - start,
        evaluated_s=stored.evaluated_at - start if stored.evaluated_at else None,
        tokens=sum(call.input_tokens + call.output_tokens for call in own),
        cost_usd=sum(call.cost_usd for call in own))


def _best_kernel(ranking: Ranking, by_id: Mapping[str, StoredCandidate],
                 task_source: str) -> BestKernel | None:
    """The ranking's best, with what the report shows beside it."""
    if ranking.best is None:
        return None
    chosen = by_id[ranking.best.id]
    parents = chosen.candidate.parent_ids
    return BestKernel(stored=chosen, parent=by_id.get(parents[0]) if parents else None,
                      reference_source=_reference(ranking, by_id, task_source),
                      timed=ranking.timed, spreads=_spreads(chosen))


def reference_source(stored: list[StoredCandidate], task_source: str) -> str:
    """The PyTorch baseline every run starts from, else the task file itself."""
    return _reference(rank_candidates(stored), {c.id: c for c in stored}, task_source)


def _reference(ranking: Ranking, by_id: Mapping[str, StoredCandidate], task_source: str) -> str:
    baseline = ranking.baseline
    return by_id[baseline.id].candidate.source if baseline else task_source


def _spreads(stored: StoredCandidate) -> dict[str, tuple[float, float]]:
    """Speedup ranges from the interquartile ranges of both contestants' samples."""
    timings = stored.verdict.timings if stored.verdict else {}
    own = timings.get("candidate")
    spreads = {}
    for metric, baseline_name in BASELINES.items():
        baseline = timings.get(baseline_name)
        if own is None or baseline is None:
            continue
        own_low, own_high = own.median_ms - own.iqr_ms / 2, own.median_ms + own.iqr_ms / 2
        base_low = baseline.median_ms - baseline.iqr_ms / 2
        base_high = baseline.median_ms + baseline.iqr_ms / 2
        if own_low > 0:
            spreads[metric] = (base_low / own_high, base_high / own_low)
    return spreads


def _models(config: Mapping[str, Any], calls: list[LlmCall]) -> tuple[ModelUsage, ...]:
    # One pass over the calls: a name per call appended to the list made this
    # quadratic, and listed a model once per call (50,000 rows at 50k calls).
    names = dict.fromkeys([*((config.get("llm") or {}).get("models") or {}),
                           *(call.model for call in calls)])
    by_name: dict[str, list[LlmCall]] = {name: [] for name in names}
    for call in calls:
        by_name[call.model].append(call)
    return tuple(ModelUsage(name, len(own), sum(c.input_tokens + c.output_tokens for c in own),
                            sum(c.cost_usd for c in own)) for name, own in by_name.items())


def _environment(stored: list[StoredCandidate], best: BestKernel | None) -> dict[str, str]:
    """Versions and device of the best kernel's judge, else of a timed (GPU) verdict."""
    if best is not None and best.stored.verdict and best.stored.verdict.environment:
        return dict(best.stored.verdict.environment)
    verdicts = [c.verdict for c in stored if c.verdict is not None and c.verdict.environment]
    timed = [v for v in verdicts if v.environment.get("gpu")]
    chosen = (timed or verdicts or [None])[-1]
    return dict(chosen.environment) if chosen else {}


def call_mode(call: LlmCall) -> str:
    """The proposal mode (rewrite, diff, repair) recorded with an LLM call's prompt."""
    prompt = call.prompt if isinstance(call.prompt, dict) else {}
    return str(prompt.get("mode", ""))
