"""The evolutionary search: LLM and tuner proposals, evaluation workers, archive, store.

Only this module knows every stage. Proposals and evaluations overlap: LLM
calls are coroutines (several in flight), evaluations run in threads (one per
GPU, each with its own judge), and a candidate is judged as soon as it
exists; there is no generation barrier. Everything is written to the run
store as it happens, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from kernelevo.budget import Budget, BudgetExhausted
from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import Verdict, verdict_for
from kernelevo.llm.protocol import LLMError
from kernelevo.propose import tuner
from kernelevo.search.archive import Archive, ArchiveEntry
from kernelevo.search.descriptors import cell_of
from kernelevo.store import RunStore

if TYPE_CHECKING:
    from kernelevo.search.proposals import LLMProposer, Proposal


@dataclass(frozen=True)
class SearchConfig:
    """Settings of the search itself (the judge has its own EvalConfig)."""

    backend: str = "triton"
    islands: int = 3
    migration_interval: int = 10
    inspirations: int = 2
    llm_in_flight: int = 8
    max_output_tokens: int = 8192
    repair_tries: int = 2
    tuner_variants: int = 3
    diff_probability: float = 0.5
    seed: int = 0
    queued_per_worker: int = 2  # proposals wait while this many per worker await judging
    build_workers: int = 2  # CPU processes compiling CUDA candidates ahead of the GPUs


@dataclass
class Progress:
    """A snapshot for the live display."""

    best_vs_eager: float | None = None
    best_vs_compile: float | None = None
    best_id: str | None = None
    by_status: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    cost_usd: float = 0.0
    elapsed_s: float = 0.0
    gpu_busy_share: float = 0.0
    queued: int = 0
    llm_in_flight: int = 0
    message: str = ""


def fitness(verdict: Verdict) -> float | None:
    """Speedup over eager; a correct candidate without timings (CPU) counts as 1."""
    if not verdict.ok:
        return None
    return verdict.speedup_vs_eager if verdict.speedup_vs_eager is not None else 1.0


class JudgeQueue:
    """Candidates waiting for a judge: the LLM's and the seeds' first, tuner variants after.

    A tuner variant costs no tokens and a new elite yields several, so they
    fill time the GPUs would otherwise idle, but never delay a kernel the LLM
    was paid for, nor the verdict its next prompts should learn from.
    """

    def __init__(self) -> None:
        self._items: asyncio.PriorityQueue[tuple[int, int, str]] = asyncio.PriorityQueue()
        self._order = itertools.count()
        self.urgent = 0  # queued candidates that are not tuner variants

    def put(self, candidate_id: str, origin: str) -> None:
        urgent = origin != "tuner"
        self.urgent += urgent
        self._items.put_nowait((0 if urgent else 1, next(self._order), candidate_id))

    async def get(self) -> str:
        rank, _, candidate_id = await self._items.get()
        self.urgent -= rank == 0
        return candidate_id

    def qsize(self) -> int:
        return self._items.qsize()

    def empty(self) -> bool:
        return self._items.empty()


class Evolution:
    """One run of the search over one task."""

    def __init__(self, store: RunStore, judges: list[Any], config: SearchConfig, budget: Budget,
                 proposer: "LLMProposer | None",
                 on_progress: Callable[[Progress], None] | None = None) -> None:
        self.store, self.judges, self.config, self.budget = store, judges, config, budget
        self.proposer = proposer
        self.on_progress = on_progress or (lambda progress: None)
        self.archive = Archive(config.islands, random.Random(config.seed),
                               config.migration_interval)
        self.rng = random.Random(config.seed + 1)
        self.queue = JudgeQueue()
        self.to_build = JudgeQueue()
        self.building = 0
        self.repairs: asyncio.Queue[str] = asyncio.Queue()
        self.repair_depth: dict[str, int] = {}
        self.progress = Progress()
        self.busy_s = 0.0
        self.started = time.monotonic()
        self.first_evaluation: float | None = None
        self.evaluating = 0
        self.stopping = False
        self.last_elapsed_log = 0.0

    # -- set-up and resume ---------------------------------------------------

    def seed(self, candidates: list[Candidate]) -> None:
        """Add the starting candidates of a new run."""
        for candidate in candidates:
            self._add(candidate, island=self.archive.choose_island(), parents=(), counted=False)

    def resume(self) -> None:
        """Rebuild the archive from evaluated candidates; queue interrupted evaluations."""
        stored = [c for c in self.store.candidates() if c.verdict is not None]
        stored.sort(key=lambda c: (c.evaluated_at or 0.0, c.sequence))
        entries = [ArchiveEntry(c.id, tuple(c.cell or ()), fitness(c.verdict), c.island or 0)
                   for c in stored]
        self.archive = Archive.rebuild(entries, **self.archive.settings())
        for pending in self.store.pending():
            if pending.evaluation_attempts >= 2:
                # Interrupted twice: redo at most once, then it is a verdict.
                self.store.record_verdict(pending.id, verdict_for(
                    "killed_by_signal", "the evaluation was interrupted twice by a crash"))
            else:
                self.queue.put(pending.id, pending.candidate.origin)

    # -- the run ---------------------------------------------------------------

    async def run(self) -> Progress:
        executor = ThreadPoolExecutor(max_workers=len(self.judges), thread_name_prefix="judge")
        evaluators = [asyncio.create_task(self._evaluate_forever(judge, executor))
                      for judge in self.judges]
        builders = ThreadPoolExecutor(max_workers=self.config.build_workers,
                                      thread_name_prefix="build")
        evaluators += [asyncio.create_task(self._build_forever(builders))
                       for _ in range(self.config.build_workers)]
        proposers = []
        if self.proposer is not None:
            proposers = [asyncio.create_task(self._propose_forever())
                         for _ in range(self.config.llm_in_flight)]
        try:
            await self._until_done(proposers)
        finally:
            self.stopping = True
            for task in evaluators + proposers:
                task.cancel()
            await asyncio.gather(*evaluators, *proposers, return_exceptions=True)
            executor.shutdown(wait=True)
            builders.shutdown(wait=True)
            self._report("stopped")
        return self.progress

    async def _until_done(self, proposers: list[asyncio.Task]) -> None:
        """Return once nothing is queued or running and no proposer can add more."""
        while True:
            await asyncio.sleep(0.2)
            self._report()
            reason = self.budget.exhausted()
            producing = any(not task.done() for task in proposers)
            drained = (self.queue.empty() and self.evaluating == 0 and self.to_build.empty()
                       and self.building == 0)
            if drained and not reason and not producing and self._tune_again():
                continue
            if drained and (reason or not producing):
                reason = reason or "nothing left to try"
                self.store.log_event("stop", {"reason": reason})
                self.progress.message = reason
                return

    async def _build_forever(self, executor: ThreadPoolExecutor) -> None:
        """Compile CUDA candidates on CPU cores before they reach a GPU worker."""
        loop = asyncio.get_running_loop()
        while True:
            candidate_id = await self.to_build.get()
            self.building += 1
            stored = self.store.candidate(candidate_id)
            try:
                await loop.run_in_executor(executor, self.judges[0].prebuild, stored.candidate)
            except Exception as exc:  # the judging worker builds it then and reports failures
                self.store.log_event("prebuild_failed", {"candidate": candidate_id,
                                                         "error": str(exc)[:500]})
            finally:
                self.building -= 1
            self.queue.put(candidate_id, stored.candidate.origin)

    async def _evaluate_forever(self, judge: Any, executor: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        while True:
            candidate_id = await self.queue.get()
            if (self.budget.exhausted() or "").startswith("time budget"):
                continue  # out of time: it stays pending for a resumed run
            stored = self.store.candidate(candidate_id)
            self.store.mark_evaluating(candidate_id)
            self.evaluating += 1
            started = time.monotonic()
            self.first_evaluation = self.first_evaluation or started
            try:
                verdict = await loop.run_in_executor(executor, judge.evaluate, stored.candidate)
            except Exception as exc:  # a task problem mid-run must not kill the search
                verdict = verdict_for("exited_early", f"the judge failed: {exc}")
            finally:
                self.busy_s += time.monotonic() - started
                self.evaluating -= 1
            self.store.record_verdict(candidate_id, verdict)
            self._after_verdict(stored, verdict)

    def _after_verdict(self, stored: Any, verdict: Verdict) -> None:
        island = stored.island or 0
        accepted = self.archive.add(stored.id, tuple(stored.cell or ()), fitness(verdict), island)
        if self.archive.last_migration:
            self.store.log_event("migration", {"moves": len(self.archive.last_migration)})
        if accepted:
            self.store.log_event("elite", {"candidate": stored.id, "island": island,
                                           "fitness": fitness(verdict)})
        repairable = verdict.status in ("compile_error", "runtime_error", "incorrect")
        depth = self.repair_depth.get(stored.id, 0)
        if repairable and self.proposer is not None and depth < self.config.repair_tries:
            self.repairs.put_nowait(stored.id)
        if accepted and stored.candidate.backend in ("triton", "cuda"):
            # Only a new elite is worth tuning: tuning every correct variant
            # would multiply the queue without bound.
            self._tune(stored, island)

    def _tune(self, stored: Any, island: int) -> int:
        """Zero-token variants of a working kernel's numeric parameters; how many were added."""
        variants = tuner.propose_variants(stored.candidate.source, stored.candidate.backend,
                                          self.rng, count=self.config.tuner_variants)
        added = 0
        for source, changes in variants:
            if self.store.find_by_hash(Candidate(source, stored.candidate.backend).source_hash):
                continue
            candidate = Candidate(source=source, backend=stored.candidate.backend,
                                  name=tuner.describe_change(changes), origin="tuner",
                                  parent_ids=(stored.id,))
            if not self._add(candidate, island, parents=(stored.id,)):
                break
            added += 1
        return added

    def _tune_again(self) -> bool:
        """With nothing else left to judge, new variants of the fittest elites; False if none.

        Variants are drawn at random, so an elite's first few may all have been
        slower; its untried neighbours are still worth the time left.
        """
        for elite in self.archive.elites():
            stored = self.store.candidate(elite.candidate_id)
            if stored.candidate.backend in ("triton", "cuda") and self._tune(stored, elite.island):
                return True
        return False

    async def _propose_forever(self) -> None:
        assert self.proposer is not None
        backlog = self.config.queued_per_worker * len(self.judges)
        while not self.stopping and not self.budget.exhausted():
            if self.queue.urgent + self.to_build.urgent >= backlog:
                # Enough of the LLM's work waits for the GPUs: new proposals
                # would not yet see the verdicts they should learn from, so
                # hold back. Queued tuner variants do not count: they only
                # fill time the GPUs would otherwise idle.
                await asyncio.sleep(0.1)
                continue
            repair_of = None if self.repairs.empty() else self.repairs.get_nowait()
            proposal = await self._propose_one(repair_of)
            if proposal is None:
                continue
            if proposal.stop:
                return

    async def _propose_one(self, repair_of: str | None) -> Proposal | None:
        from kernelevo.search.proposals import Proposal

        assert self.proposer is not None
        island = self.archive.choose_island()
        if repair_of is not None:
            parent = self.store.candidate(repair_of)
            island = parent.island or 0
            inspirations: list[Any] = []
        else:
            parent, inspirations = self._select(island)
            if parent is None:
                await asyncio.sleep(0.2)  # nothing correct yet: wait for the seeds' verdicts
                return None
        self.progress.llm_in_flight += 1
        try:
            proposal = await self.proposer.propose(parent, inspirations,
                                                   repair=repair_of is not None)
        except BudgetExhausted as exc:
            self.store.log_event("budget", {"message": str(exc)})
            return Proposal(stop=True)
        except LLMError as exc:
            self.store.log_event("llm_error", {"message": str(exc)})
            await asyncio.sleep(1.0)
            return None
        finally:
            self.progress.llm_in_flight -= 1
        if proposal.candidate is not None:
            candidate_id = self._add(proposal.candidate, island, parents=(parent.id,),
                                     inspirations=tuple(i.id for i in inspirations))
            if candidate_id and proposal.call_id is not None:
                self.store.link_llm_call(proposal.call_id, candidate_id)
            if candidate_id and repair_of is not None:
                self.repair_depth[candidate_id] = self.repair_depth.get(repair_of, 0) + 1
        return proposal

    def _select(self, island: int) -> tuple[Any, list[Any]]:
        elite = self.archive.sample_parent(island)
        if elite is None:
            return None, []
        inspirations = self.archive.sample_inspirations(island, elite.candidate_id,
                                                        self.config.inspirations)
        return (self.store.candidate(elite.candidate_id),
                [self.store.candidate(e.candidate_id) for e in inspirations])

    # -- bookkeeping -----------------------------------------------------------

    def _add(self, candidate: Candidate, island: int, parents: tuple[str, ...],
             inspirations: tuple[str, ...] = (), counted: bool = True) -> str | None:
        """Store a candidate and queue it; None when a budget is spent."""
        if counted and (self.budget.exhausted() or not self.budget.count_candidate()):
            return None
        candidate_id = self.store.add_candidate(
            candidate, island=island, cell=list(cell_of(candidate.source, candidate.backend)),
            parent_ids=parents, inspiration_ids=inspirations)
        prebuild = getattr(self.judges[0], "device", "cpu") == "cuda" and candidate.backend == "cuda"
        (self.to_build if prebuild else self.queue).put(candidate_id, candidate.origin)
        return candidate_id

    def _report(self, message: str | None = None) -> None:
        totals = self.store.totals()
        # The one rule `show`, `export` and reports use; it reads every candidate,
        # so it runs again only when a new verdict may have changed the answer.
        judged = totals.candidates_by_status != self.progress.by_status
        best = self.store.best() if judged else None
        elapsed = time.monotonic() - self.started
        progress = self.progress
        progress.by_status = dict(totals.candidates_by_status)
        progress.tokens = totals.tokens_in + totals.tokens_out
        progress.cost_usd = totals.cost_usd
        progress.elapsed_s = elapsed
        # Busy share counts from the first evaluation: before it, nothing was queued.
        since = time.monotonic() - (self.first_evaluation or time.monotonic())
        progress.gpu_busy_share = self.busy_s / (since * len(self.judges)) if since > 0 else 0.0
        progress.queued = self.queue.qsize()
        if best is not None and best.verdict is not None:
            progress.best_id = best.id
            progress.best_vs_eager = best.verdict.speedup_vs_eager
            progress.best_vs_compile = best.verdict.speedup_vs_compile
        if message:
            progress.message = progress.message or message
        if message or elapsed - self.last_elapsed_log > 5.0:
            # The wall-clock budget of a resumed run starts from this.
            self.store.log_event("elapsed", {"elapsed_s": self.budget.usage().elapsed_s})
            self.store.log_event("busy", {"share": progress.gpu_busy_share})
            self.last_elapsed_log = elapsed
        self.on_progress(progress)
