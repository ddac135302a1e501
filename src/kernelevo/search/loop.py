"""The evolutionary search: LLM and tuner proposals, evaluation workers, archive, store.

Only this module knows every stage. Proposals and evaluations overlap: LLM
calls are coroutines (several in flight), evaluations run in threads (one per
GPU, each with its own judge), and a candidate is judged as soon as it
exists; there is no generation barrier. Everything is written to the run
store as it happens, so a killed run resumes where it stopped.

A run ends with a RunOutcome. An error inside any of its tasks is never
swallowed: it is logged, stored as an event and ends the run as `error`; an
LLM failure that retrying cannot fix (a refused request, an endpoint that is
down, or no call succeeding for [llm] give_up_s) ends it as `llm_failed`, as
does a run whose LLM calls all failed, whatever the seeds and the tuner
did meanwhile ("the LLM never answered"). A run whose candidates were all judged
and all failed, none left to repair, ends as `error`: proposals need a
passing parent, which can no longer come. A run store that cannot be written (a
full disk) is not an outcome: `run` raises its StoreError, as nothing more
can be recorded.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Coroutine

from kernelevo.budget import Budget
from kernelevo.candidate import KERNEL_BACKENDS, Candidate
from kernelevo.errors import BudgetExhausted, LLMError, StoreError, TaskError
from kernelevo.evaluate.protocol import JudgeLike
from kernelevo.evaluate.verdict import Verdict, verdict_for
from kernelevo.propose import tuner
from kernelevo.search.archive import Archive, fitness, fitness_high, profile_descriptor
from kernelevo.search.config import SearchConfig
from kernelevo.search.descriptors import cell_of
from kernelevo.search.outcome import (Progress, RunOutcome, never_answered, no_parent_reason,
                                       roofline_reached)
from kernelevo.search.queue import JudgeQueue
from kernelevo.store.run_store import RunStore

if TYPE_CHECKING:
    from kernelevo.search.proposals import LLMProposer, Proposal

log = logging.getLogger(__name__)


class Evolution:
    """One run of the search over one task."""

    def __init__(self, store: RunStore, judges: list[JudgeLike], config: SearchConfig,
                 budget: Budget,
                 proposer: "LLMProposer | None",
                 on_progress: Callable[[Progress], None] | None = None, *,
                 start_judges: Callable[[], Future[list[JudgeLike]]] | None = None) -> None:
        """`start_judges`, given instead of `judges`, makes them in the background once
        the search runs: its first LLM requests then wait for no judge (nor torch)."""
        self.store, self.judges, self.config, self.budget = store, judges, config, budget
        self.start_judges = start_judges
        self.judging = start_judges is None  # whether the judges are known
        self.judge_failure: BaseException | None = None  # the judges could not be made
        # Candidates added before the judges were made: routed once they are.
        self.held: list[tuple[str, Candidate]] = []
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
        self.fatal: RunOutcome | None = None  # set by the first failure that ends the run
        self.store_failure: StoreError | None = None  # the run store could not be written
        self.task_failed = False  # the task's own reference failed in a judge
        self.llm_answers = 0
        self.llm_failures = 0
        self.last_llm_error = ""
        self.budget_stop = ""  # why a proposer stopped for good on a budget refusal
        self.roofline_stop = ""  # why the search ended at a kernel near its roofline
        # Called with (stored, verdict) for each new elite that passed (the memory keeps it).
        self.on_elite: Callable[[Any, Verdict], None] | None = None

    # -- set-up and resume ---------------------------------------------------

    def seed(self, candidates: list[Candidate]) -> None:
        """Add the starting candidates of a new run."""
        for candidate in candidates:
            self._add(candidate, island=self.archive.choose_island(), parents=(), counted=False)

    def resume(self) -> None:
        """Rebuild the archive from evaluated candidates; queue interrupted evaluations."""
        # The archive replaying every verdict would build (Archive.replay of
        # judged_in_order), from the few that could be elites: at 200,000
        # candidates a Python object per verdict cost ~120 MB before the first request.
        offers = self.store.briefs.archive_offers()
        self.archive = Archive.replay_offers(offers.offers, offers.additions, offers.failures,
                                             **self.archive.settings())
        for pending in self.store.pending():
            if pending.evaluation_attempts >= 2:
                # Interrupted twice: redo at most once, then it is a verdict.
                self.store.record_verdict(pending.id, verdict_for(
                    "killed_by_signal", "the evaluation was interrupted twice by a crash"))
            else:
                self.queue.put(pending.id, pending.candidate.origin)

    # -- the run ---------------------------------------------------------------

    async def run(self) -> Progress:
        """Search until done; `Progress.outcome` then says how the run ended."""
        evaluators: list[asyncio.Task] = []
        executors: list[ThreadPoolExecutor] = []
        proposers = []
        if self.proposer is not None:
            proposers = [self._start(self._propose_forever(), "proposer")
                         for _ in range(self.config.llm_in_flight)]
        if self.start_judges is None:
            self._start_judging(evaluators, executors)
        else:
            evaluators.append(asyncio.create_task(
                self._judges_then_judging(self.start_judges, evaluators, executors)))
        try:
            await self._until_done(proposers)
        finally:
            self.stopping = True
            for task in evaluators + proposers:
                task.cancel()
            await asyncio.gather(*evaluators, *proposers, return_exceptions=True)
            for executor in executors:
                executor.shutdown(wait=True)
            if self.store_failure is None:
                self._report("stopped")
        return self.progress

    def _start_judging(self, evaluators: list[asyncio.Task],
                       executors: list[ThreadPoolExecutor]) -> None:
        """A worker per judge and the CUDA builders; candidates held meanwhile are queued."""
        executor = ThreadPoolExecutor(max_workers=len(self.judges), thread_name_prefix="judge")
        builders = ThreadPoolExecutor(max_workers=self.config.build_workers,
                                      thread_name_prefix="build")
        executors += [executor, builders]
        evaluators += [self._start(self._evaluate_forever(judge, executor), "judge")
                       for judge in self.judges]
        evaluators += [self._start(self._build_forever(builders), "builder")
                       for _ in range(self.config.build_workers)]
        self.judging = True
        held, self.held = self.held, []
        for candidate_id, candidate in held:
            self._queue_for_judging(candidate_id, candidate)

    async def _judges_then_judging(self, start: Callable[[], Future[list[JudgeLike]]],
                                   evaluators: list[asyncio.Task],
                                   executors: list[ThreadPoolExecutor]) -> None:
        """Judging once the judges made in the background are ready; if they could not be
        made, the run ends with that error (_until_done raises it)."""
        # Started after the proposers' first steps (tasks run in the order made), which
        # build their prompts and open their connections, and one more turn of the loop,
        # in which they send: torch loading on another thread would slow both.
        await asyncio.sleep(0)
        try:
            self.judges = await asyncio.wrap_future(start())
            self._start_judging(evaluators, executors)
        except Exception as exc:
            self.judge_failure = exc

    def _start(self, work: Coroutine[Any, Any, None], role: str) -> asyncio.Task:
        return asyncio.create_task(self._supervised(work, role))

    async def _supervised(self, work: Coroutine[Any, Any, None], role: str) -> None:
        """Run one task of the run; an error in it ends the run instead of vanishing."""
        try:
            await work
        except StoreError as exc:
            # The disk is full or failing: the run stops at once and run() raises
            # this, the one message the user needs; a traceback would not help.
            log.debug("the %s task stopped: %s", role, exc)
            self.store_failure = self.store_failure or exc
        except Exception as exc:  # a bug or a broken store: the run cannot go on as asked
            log.exception("the %s task failed", role)
            self._fail("error", f"the {role} task failed: {type(exc).__name__}: {exc}")
            try:
                self.store.log_event("task_error", {"role": role, "error": repr(exc)[:2000],
                                                    "traceback": traceback.format_exc()[-4000:]})
            except Exception:  # the store may be what broke; the log above has it all
                log.exception("could not record the %s task's failure in the store", role)

    def _fail(self, status: str, reason: str) -> None:
        """End the run as soon as the main loop sees it; the first failure wins."""
        if self.fatal is None:
            self.fatal = RunOutcome(status, reason)

    async def _until_done(self, proposers: list[asyncio.Task]) -> None:
        """Return once nothing is queued or running and no proposer can add more."""
        while True:
            await asyncio.sleep(0.2)
            if self.store_failure is not None:
                raise self.store_failure
            if self.judge_failure is not None:
                raise self.judge_failure
            self._report()
            if self.fatal is not None:
                return self._finish(self.fatal)
            if self.roofline_stop:
                return self._finish(RunOutcome("finished", self.roofline_stop))
            reason = self.budget.exhausted()
            producing = any(not task.done() for task in proposers)
            drained = (self.judging and self.queue.empty() and self.evaluating == 0
                       and self.to_build.empty() and self.building == 0)
            if drained and not reason and not producing and self._tune_again():
                continue
            if drained and (reason or not producing):
                return self._finish(self._outcome(reason))
            if drained and producing and self._nothing_to_build_on():
                return self._finish(RunOutcome("error", self._no_parent_reason()))

    def _nothing_to_build_on(self) -> bool:
        """Whether proposers wait for a parent that cannot come: no elite, nothing to repair."""
        return (not self.archive.elites() and self.repairs.empty()
                and self.progress.llm_in_flight == 0)

    def _no_parent_reason(self, why_stop: str = "so the LLM has no kernel to improve") -> str:
        return no_parent_reason(self.store.candidates(), why_stop)

    def _outcome(self, budget_reason: str | None) -> RunOutcome:
        """How a run that ran out of work or budget ended."""
        reason = budget_reason or self.budget_stop
        if self.task_failed and not self.archive.elites():
            # the task's reference failed: no search could have found anything
            return RunOutcome("error", self._no_parent_reason("as the task itself failed"))
        if reason:
            return RunOutcome("budget_spent", reason)
        return RunOutcome("finished", "nothing left to try")

    def _never_answered(self, outcome: RunOutcome) -> RunOutcome:
        return never_answered(outcome, self.proposer is not None, self.llm_answers,
                              self.llm_failures, self.last_llm_error)

    def _finish(self, outcome: RunOutcome) -> None:
        outcome = self._never_answered(outcome)
        self.progress.by_origin = self.store.briefs.by_origin()
        # Recorded first: a store that cannot record it raises, and says why, only once.
        self.store.log_event("stop", {"status": outcome.status, "reason": outcome.reason})
        if outcome.failed:
            log.error("run stopped (%s): %s", outcome.status, outcome.reason)
        self.progress.message = outcome.reason
        self.progress.outcome = outcome

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

    async def _evaluate_forever(self, judge: JudgeLike, executor: ThreadPoolExecutor) -> None:
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
            except TaskError as exc:  # the task's own reference failed: no candidate can pass
                verdict = verdict_for("exited_early", f"the judge failed: {exc}")
                self.task_failed = True
            except Exception as exc:  # a task problem mid-run must not kill the search
                verdict = verdict_for("exited_early", f"the judge failed: {exc}")
            finally:
                self.busy_s += time.monotonic() - started
                self.evaluating -= 1
            self.store.record_verdict(candidate_id, verdict)
            self._after_verdict(stored, verdict)

    def _after_verdict(self, stored: Any, verdict: Verdict) -> None:
        island = stored.island or 0
        accepted = self.archive.add(stored.id, tuple(stored.cell or ()), fitness(verdict), island,
                                    fitness_high(verdict))
        if self.archive.last_migration:
            self.store.log_event("migration", {"moves": len(self.archive.last_migration)})
        if accepted:
            self.store.log_event("elite", {"candidate": stored.id, "island": island,
                                           "fitness": fitness(verdict),
                                           **profile_descriptor(verdict)})
            if self.on_elite is not None and verdict.status == "ok":
                self.on_elite(stored, verdict)
        reached = roofline_reached(verdict, self.config.stop_at_roofline)
        if reached and not self.roofline_stop:
            self.roofline_stop = reached
            self.store.log_event("roofline_reached", {"candidate": stored.id, "reason": reached})
        repairable = verdict.status in ("compile_error", "runtime_error", "incorrect")
        depth = self.repair_depth.get(stored.id, 0)
        if repairable and self.proposer is not None and depth < self.config.repair_tries:
            self.repairs.put_nowait(stored.id)
        if accepted and stored.candidate.backend in KERNEL_BACKENDS:
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
            if stored.candidate.backend in KERNEL_BACKENDS and self._tune(stored, elite.island):
                return True
        return False

    async def _propose_forever(self) -> None:
        assert self.proposer is not None
        while not self.stopping and not self.budget.exhausted():
            # Judges still being made count as one until they are.
            backlog = self.config.queued_per_worker * max(1, len(self.judges))
            held = sum(candidate.origin != "tuner" for _, candidate in self.held)
            if self.queue.urgent + self.to_build.urgent + held >= backlog:
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
            # Final: the pool waits out refusals that settling calls could lift.
            self.store.log_event("budget", {"message": str(exc)})
            self.budget_stop = self.budget_stop or str(exc)
            return Proposal(stop=True)
        except LLMError as exc:
            failure: LLMError | None = exc
        else:
            failure = None
        finally:
            self.progress.llm_in_flight -= 1
        if failure is not None:
            return await self._llm_failed(failure)
        if proposal.call_id is not None:
            self.llm_answers += 1
        if proposal.candidate is not None:
            candidate_id = self._add(proposal.candidate, island, parents=(parent.id,),
                                     inspirations=tuple(i.id for i in inspirations))
            if candidate_id and proposal.call_id is not None:
                self.store.link_llm_call(proposal.call_id, candidate_id)
            if candidate_id and repair_of is not None:
                self.repair_depth[candidate_id] = self.repair_depth.get(repair_of, 0) + 1
        return proposal

    async def _llm_failed(self, error: LLMError) -> Proposal:
        from kernelevo.search.proposals import Proposal

        self.llm_failures += 1
        self.last_llm_error = str(error)
        self.store.log_event("llm_error", {"message": str(error), "fatal": error.fatal,
                                           "status": error.status_code})
        if error.fatal:  # retrying cannot help: stop now, with the server's word
            self._fail("llm_failed", str(error))
            return Proposal(stop=True)
        log.warning("LLM call failed: %s", error)
        await asyncio.sleep(1.0)
        return Proposal()

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
            candidate, island=island, cell=cell_of(candidate.source, candidate.backend),
            parent_ids=parents, inspiration_ids=inspirations)
        self._queue_for_judging(candidate_id, candidate)
        return candidate_id

    def _queue_for_judging(self, candidate_id: str, candidate: Candidate) -> None:
        """Queue a stored candidate: a CUDA one on a GPU to be built first; held while the
        judges (and so the device) are not known yet."""
        if not self.judging:
            self.held.append((candidate_id, candidate))
            return
        prebuild = getattr(self.judges[0], "device", "cpu") == "cuda" and candidate.backend == "cuda"
        (self.to_build if prebuild else self.queue).put(candidate_id, candidate.origin)

    def _report(self, message: str | None = None) -> None:
        totals = self.store.totals()
        # The one rule `show`, `export` and reports use, read from an index on
        # every tick (a fraction of a millisecond at 50,000 candidates), so a
        # verdict judged again, which leaves the counts as they were, is seen too.
        best = self.store.briefs.best()
        elapsed = time.monotonic() - self.started
        progress = self.progress
        progress.by_status = dict(totals.candidates_by_status)
        progress.tokens = totals.tokens_in + totals.tokens_out
        progress.estimated_tokens = totals.estimated_tokens
        progress.cost_usd = totals.cost_usd
        # The run's own clock (a resumed run's earlier time included), the one
        # stored below and shown by show, the report and the UI.
        progress.elapsed_s = self.budget.usage().elapsed_s
        # Busy share counts from the first evaluation: before it, nothing was queued.
        since = time.monotonic() - (self.first_evaluation or time.monotonic())
        progress.gpu_busy_share = self.busy_s / (since * len(self.judges)) if since > 0 else 0.0
        progress.queued = self.queue.qsize()
        progress.best_id = best.id if best else None
        progress.best_vs_eager = best.speedup_vs_eager if best else None
        progress.best_vs_compile = best.speedup_vs_compile if best else None
        if message:
            progress.message = progress.message or message
        if message or elapsed - self.last_elapsed_log > 5.0:
            # The wall-clock budget of a resumed run starts from this.
            self.store.log_event("elapsed", {"elapsed_s": self.budget.usage().elapsed_s})
            self.store.log_event("busy", {"share": progress.gpu_busy_share})
            self.last_elapsed_log = elapsed
        self.on_progress(progress)

