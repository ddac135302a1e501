"""A stored run read into plain data: rows, best-so-far series, status counts, cells.

Everything the report and the web UI draw comes from here, so the two never
disagree. Nothing is read per candidate in full: SQLite sums, ranks and picks
(store_briefs) and only the best kernel, its parent and lineage, the
baseline and the table's rows are read whole; the best-so-far steps are
kept as verdicts are written (store_steps) and the archive's cells replay
only the verdicts that could be elites. Times are seconds
since the run was created (wall time, including any pause before a resume);
spend at a moment counts the LLM calls finished by then.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelevo.errors import StoreError
from kernelevo.memory.run_memory import memory_use
from kernelevo.report.lineage import (
    MAX_LINEAGE_STEPS,
    IslandCells,
    LineageStep,
    archive_cells,
    lineage,
)
from kernelevo.report.table import ROW_LIMIT, CandidateRow, CandidateTable, RowGroup, choose_rows
from kernelevo.store.resolve import database_of
from kernelevo.store.run_store import (
    CandidateBrief,
    LlmCall,
    RankEntry,
    RunInfo,
    RunStore,
    StoredCandidate,
    Totals,
)
from kernelevo.store.lock import status_now
from kernelevo.store.records import baseline_text

__all__ = ["CandidateRow", "RunData", "load_run"]  # CandidateRow: re-exported from table

METRICS = ("speedup_vs_eager", "speedup_vs_compile")
BASELINES = {"speedup_vs_eager": "eager", "speedup_vs_compile": "compile"}
PENDING = "pending"
# The status timeline's steps past which it keeps one per span of time: finer
# than any plot drawn from it (svg.STATUS_PLOT_STEPS), and a page of a
# 50,000-candidate run holds 2,000 snapshots of the counts, not 100,000.
TIMELINE_STEPS = 2000


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
    candidate_count: int
    table: CandidateTable  # the rows shown, built in full; the rest are only counted
    improvements: tuple[Improvement, ...]
    # (seconds, count per status) after each moment, or each span past TIMELINE_STEPS
    timeline: tuple[tuple[float, dict[str, int]], ...]
    islands: tuple[IslandCells, ...]
    lineage: tuple[LineageStep, ...]
    best: BestKernel | None
    baseline: StoredCandidate | None  # the PyTorch reference: shown apart, never the best
    baseline_text: str
    no_best_message: str  # why there is no best; "" when there is one
    llm_calls: int
    # Of tokens and cost_usd, charged as a bound (calls cut off), not billed.
    estimated_tokens: int = 0
    estimated_usd: float = 0.0
    # What the memory gave the run and took from it ({} with memory off): docs/memory.md
    memory: dict[str, Any] = field(default_factory=dict)

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
    return database_of(run_path)


def load_run(run_path: Path, *, views: bool = True) -> RunData:
    """Read a run (its folder or its run.db) into RunData.

    views=False leaves out what only the run's own page shows (timeline,
    cells, lineage and table rows): a comparison of runs needs none of them.
    The page's independent reads run side by side, each on a connection of
    its own: SQLite lets go of the GIL while it reads, and with a cold page
    cache (a 4 GB run.db) each waits mostly on the disk.
    """
    database = run_database(Path(run_path))
    with ThreadPoolExecutor(max_workers=_READERS, thread_name_prefix="run-page") as pool:
        return _load(database, _Reads(pool, database), views)


# Connections reading a run page at once: the archive's replay (a third of a
# 200,000-candidate page), the timeline, the table, spend and models.
_READERS = 4


class _Reads:
    """Reads of one run, each started at once on a connection of its own."""

    def __init__(self, pool: ThreadPoolExecutor, database: Path) -> None:
        self._pool, self._database = pool, database

    def start(self, read: Callable[[RunStore], Any]) -> Future[Any]:
        def on_its_own() -> Any:
            with RunStore.read(self._database) as store:
                return read(store)

        return self._pool.submit(on_its_own)


def _archive_cells(store: RunStore) -> tuple[IslandCells, ...]:
    return archive_cells(store.briefs.archive_offers(),
                         store.run_info().config.get("search") or {})


def _load(database: Path, reads: _Reads, views: bool) -> RunData:
    with RunStore.read(database) as store:
        info = store.run_info()
        start = info.created_at
        cells = reads.start(_archive_cells) if views else None
        moments = reads.start(lambda other: other.briefs.moments())
        improvements = reads.start(lambda other: _improvements(other, start))
        models = reads.start(lambda other: other.briefs.models())
        totals, events = store.totals(), store.briefs.event_summary()
        count = sum(totals.candidates_by_status.values())
        table = reads.start(lambda other: _table(other, count, start)) if views else None
        baseline_entry = store.briefs.baseline()
        baseline = store.candidate(baseline_entry.id) if baseline_entry else None
        best = _best_kernel(store, store.briefs.best(),
                            baseline.candidate.source if baseline else info.task_source)
        # Why there is no best takes every candidate's verdict; a best takes one.
        no_best_message = "" if best else store.briefs.ranking(0).no_best_message()
        environment = _environment(best) or store.briefs.environment()
        shown = _views(store, reads, info, totals, best, moments, cells, table) \
            if cells is not None and table is not None else _Views()
        memory = memory_use(store)
    moments_found = moments.result()
    span = max([start, info.finished_at or 0.0, moments_found[1] if moments_found else 0.0,
                events.last_at or 0.0]) - start
    return RunData(
        run_id=info.id, task_name=info.task_name,
        status=status_now(info.status, database.parent),
        backend=str(info.config.get("search", {}).get("backend", "")),
        created_at=start, finished_at=info.finished_at,
        elapsed_s=span if events.elapsed_s is None else events.elapsed_s, span_s=span,
        tokens=totals.tokens_in + totals.tokens_out, cost_usd=totals.cost_usd,
        budget=dict(info.config.get("budget") or {}),
        models=_models(info.config, models.result()),
        environment=environment, stop_reason=events.stop_reason or "",
        migrations=events.migrations,
        candidate_count=count, table=shown.table, improvements=improvements.result(),
        timeline=shown.timeline, islands=shown.islands, lineage=shown.lineage, best=best,
        baseline=baseline, baseline_text=baseline_text(baseline_entry),
        no_best_message=no_best_message, llm_calls=totals.llm_calls, memory=memory,
        estimated_tokens=totals.estimated_tokens, estimated_usd=totals.estimated_usd)


@dataclass(frozen=True)
class _Views:
    """What only a run's own page shows."""

    timeline: tuple[tuple[float, dict[str, int]], ...] = ()
    islands: tuple[IslandCells, ...] = ()
    lineage: tuple[LineageStep, ...] = ()
    table: CandidateTable = CandidateTable((), "")


def _views(store: RunStore, reads: _Reads, info: RunInfo, totals: Totals,
           best: BestKernel | None, moments: Future[tuple[float, float] | None],
           cells: Future[tuple[IslandCells, ...]], table: Future[CandidateTable]) -> _Views:
    count = sum(totals.candidates_by_status.values())
    judged = count - totals.candidates_by_status.get("unevaluated", 0)
    timeline = reads.start(lambda other: _timeline(other, moments.result(), count + 2 * judged,
                                                   info.created_at))
    # The best's ancestry (each ancestor's row, scattered over a big file) is
    # read on a connection of its own too, its disk waits beside the others'.
    steps = reads.start(lambda other: _lineage(other, best.stored.id)) if best else None
    return _Views(timeline=timeline.result(), lineage=steps.result() if steps else (),
                  table=table.result(), islands=cells.result())


def _lineage(store: RunStore, best_id: str) -> tuple[LineageStep, ...]:
    chain = store.ancestry(best_id, MAX_LINEAGE_STEPS)
    return lineage(chain, best_id, store.llm_modes_of(chain))


def _table(store: RunStore, count: int, start: float) -> CandidateTable:
    """The rows a page shows, with their LLM spend; only these are read and built."""
    groups, note = choose_rows(count, store.briefs.fastest(ROW_LIMIT // 2),
                               store.briefs.candidates(newest_first=True, limit=ROW_LIMIT))
    spent = store.briefs.spend_of(brief.id for _, chosen in groups for brief in chosen)
    return CandidateTable(tuple(
        RowGroup(caption, tuple(_row(brief, start, spent.get(brief.id, (0, 0.0)))
                                for brief in chosen))
        for caption, chosen in groups), note)


def _improvements(store: RunStore, start: float) -> tuple[Improvement, ...]:
    """Best-so-far steps of the passing custom kernels only: the baseline is never a best.

    The steps are kept as verdicts are written (store_steps); only what was
    spent by each step's moment is summed here.
    """
    steps = store.briefs.best_steps()
    moments = sorted({step.evaluated_at or start for step in steps})
    spent = dict(zip(moments, store.briefs.spend_by(moments)))
    return tuple(Improvement(step.candidate_id, step.metric, step.speedup,
                             (step.evaluated_at or start) - start,
                             *spent[step.evaluated_at or start])
                 for step in steps)


def _timeline(store: RunStore, moments: tuple[float, float] | None, changes: int,
              start: float) -> tuple[tuple[float, dict[str, int]], ...]:
    """Counts per status after every moment, or span of time past TIMELINE_STEPS changes.

    Unjudged candidates are 'pending'. A span's counts are those at its last
    moment, so the final counts are exact whatever the run's size.
    """
    if moments is None:
        return ()
    first, last = moments
    spans = 0 if changes <= TIMELINE_STEPS else TIMELINE_STEPS - 2
    rows = store.briefs.status_changes(first, (last - first) / spans if spans else 0.0, spans)
    counts: dict[str, int] = {}  # statuses at zero are dropped, as a step shows none
    timeline: list[tuple[float, dict[str, int]]] = []
    last_moment = -math.inf
    for index, (span, moment, status, count) in enumerate(rows):
        # A verdict moves `count` candidates from pending to its status.
        moves = [(PENDING, count)] if status is None else [(PENDING, -count), (status, count)]
        for name, delta in moves:
            total = counts.get(name, 0) + delta
            if total:
                counts[name] = total
            else:
                counts.pop(name, None)
        last_moment = max(last_moment, moment)
        if index + 1 == len(rows) or rows[index + 1][0] != span:
            timeline.append((last_moment - start, dict(counts)))
            last_moment = -math.inf
    return tuple(timeline)


def _row(brief: CandidateBrief, start: float, spent: tuple[int, float]) -> CandidateRow:
    return CandidateRow(
        id=brief.id, name=brief.name, origin=brief.origin, backend=brief.backend,
        parent_id=brief.parent_ids[0] if brief.parent_ids else None, island=brief.island,
        status=brief.status or PENDING, reason=brief.reason or brief.state,
        speedup_vs_eager=brief.speedup_vs_eager, speedup_vs_compile=brief.speedup_vs_compile,
        runtime_ms=brief.runtime_ms, created_s=brief.created_at - start,
        evaluated_s=brief.evaluated_at - start if brief.evaluated_at else None,
        tokens=spent[0], cost_usd=spent[1])


def _best_kernel(store: RunStore, best: RankEntry | None,
                 reference: str) -> BestKernel | None:
    """The best (Briefs.best) read in full, with what the report shows beside it."""
    if best is None:
        return None
    chosen = store.candidate(best.id)
    parents = chosen.candidate.parent_ids
    return BestKernel(stored=chosen, parent=_find(store, parents[0]) if parents else None,
                      reference_source=reference, timed=best.speedup_vs_eager is not None,
                      spreads=_spreads(chosen))


def reference_source(store: RunStore, baseline: RankEntry | None, task_source: str) -> str:
    """The PyTorch baseline every run starts from, else the task file itself."""
    return store.candidate(baseline.id).candidate.source if baseline else task_source


def _find(store: RunStore, candidate_id: str) -> StoredCandidate | None:
    """The candidate in full, or None where the store has no such one."""
    try:
        return store.candidate(candidate_id)
    except StoreError:
        return None


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


def _models(config: Mapping[str, Any],
            called: list[tuple[str, int, int, float]]) -> tuple[ModelUsage, ...]:
    """The configured models, then any other called, each with what its calls spent."""
    usage = {name: ModelUsage(name, 0, 0, 0.0)
             for name in (config.get("llm") or {}).get("models") or {}}
    for name, calls, tokens, cost_usd in called:
        usage[name] = ModelUsage(name, calls, tokens, cost_usd)
    return tuple(usage.values())


def _environment(best: BestKernel | None) -> dict[str, str]:
    """Versions and device of the best kernel's judge; {} sends the caller to the store."""
    verdict = best.stored.verdict if best else None
    return dict(verdict.environment) if verdict and verdict.environment else {}


def call_mode(call: LlmCall) -> str:
    """The proposal mode (rewrite, diff, repair) recorded with an LLM call's prompt."""
    prompt = call.prompt if isinstance(call.prompt, dict) else {}
    return str(prompt.get("mode", ""))


def call_modes(calls: list[LlmCall]) -> dict[str, str]:
    """Each candidate's mode, from the last call linked to it."""
    return {call.candidate_id: call_mode(call) for call in calls if call.candidate_id}
