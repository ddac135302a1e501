"""An evolve run driven from its options: created or resumed, searched until it stops.

The one driver behind `kernelevo evolve` and `kernelevo.evolve()`. What the
user sees goes through an EvolveView: the command line's draws a live table
(cli_evolve.py), the API's prints plain lines or nothing.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import kernelevo.run.setup as setup
from kernelevo.candidate import KERNEL_BACKENDS
from kernelevo.config import PRECISIONS, tolerances
from kernelevo.errors import ConfigError, MemoryStoreError, StoreError
from kernelevo.evaluate.sandbox import jobs as sandbox
from kernelevo.evaluate.sandbox.probe import describe_here
from kernelevo.run.setup import EvolveOptions
from kernelevo.logs import get_logger
from kernelevo.memory.run_memory import (ERROR_EVENT, RECALL_EVENT, RECORD_EVENT,
                                         describe_recall, memory_seeds)
from kernelevo.store.lock import RunLock, acquire_run_lock
from kernelevo.run.resume import CHANGE_EVENT, apply_overrides, describe_changes
from kernelevo.run.signals import Terminated, on_sigterm, sigterm_as_interrupt
from kernelevo.search.config import SearchConfig
from kernelevo.search.loop import Evolution
from kernelevo.search.outcome import Progress, RunOutcome
from kernelevo.store.run_store import RunStore

if TYPE_CHECKING:
    from kernelevo.budget import Budget
    from kernelevo.candidate import Candidate
    from kernelevo.config import EvalConfig
    from kernelevo.task import Task

log = get_logger(__name__)
UNRECORDED_STOP = ("not recorded: its driver was killed outright (SIGKILL, out of memory) or "
                   "its machine stopped")


class EvolveView(Protocol):
    """How a run shows itself while it is driven."""

    def notice(self, text: str) -> None:
        """One line of plain text: the run started, what it was charged, settings changed."""

    def searching(self, run_id: str, mode: str) -> AbstractContextManager[
            Callable[[Progress], None]]:
        """Entered while the search runs; gives the callback each Progress goes to."""


def _ignore(_: Any) -> None:
    return None


@dataclass(frozen=True)
class PlainView:
    """Notices to `say`, each Progress to `on_progress`; by default nothing is shown."""

    say: Callable[[str], None] = _ignore
    on_progress: Callable[[Progress], None] = _ignore

    def notice(self, text: str) -> None:
        self.say(text)

    @contextmanager
    def searching(self, run_id: str, mode: str) -> Iterator[Callable[[Progress], None]]:
        yield self.on_progress


@dataclass(frozen=True)
class EvolveResult:
    """Where a run is stored and how it stopped."""

    run_id: str
    run_dir: Path
    progress: Progress

    @property
    def best_id(self) -> str | None:
        """The fastest correct kernel's candidate id (None if there is none)."""
        return self.progress.best_id

    @property
    def outcome(self) -> RunOutcome | None:
        """How the run ended: finished, budget_spent, llm_failed or error, and why."""
        return self.progress.outcome


@dataclass(frozen=True)
class _Plan:
    """Everything a run needs that bad input can break, built before a new run is stored."""

    config: dict[str, Any]
    eval_config: EvalConfig
    search: SearchConfig
    limits: dict[str, Any]
    budget: Budget
    pool: Any  # a ModelPool, or None: the tuner runs alone
    judges: list[Any] | setup.JudgesStarting  # a resumed run's start with its search
    seeds: list[Candidate]
    memory: Any = None  # a RunMemory, or None: memory off
    recall: Any = None  # what the memory gave this run (a Recall), or None


def run_evolve(task: Task | None, options: EvolveOptions,
               view: EvolveView | None = None) -> EvolveResult:
    """Create or resume a run and search until a budget or the work runs out.

    Flags are checked (judges, models, seeds built) before a new run is
    stored, so a bad start leaves no run behind; a run that fails or is
    stopped (Ctrl-C, SIGTERM) after that is marked `interrupted` with the reason.
    A resume given a task, seeds or settings the run may not change is refused
    before the run is locked or written (run_resume.py).
    """
    view = view or PlainView()
    store: RunStore | None = None
    lock: RunLock | None = None
    plan: _Plan | None = None
    with sigterm_as_interrupt():
        try:
            changes: dict[str, Any] = {}
            if options.resume:
                store, stored_task, config = setup.open_to_resume(options.runs_dir,
                                                                  options.resume)
                setup.refuse_changes(store, task, options)
                task = stored_task
                lock = acquire_run_lock(Path(store.path).parent, store.run_id)
                _note_unrecorded_stop(store)
                config, changes = apply_overrides(config, options.overrides)
            else:
                config = setup.run_config(options.eval, options.search, options.llm,
                                          options.budget)
            if task is None:
                raise ConfigError("give a task, or resume=RUN to continue a run")
            plan = _plan(task, config, options, store)
            if store is None:
                store = RunStore.create(options.runs_dir, task.name, task.source, config)
                lock = acquire_run_lock(Path(store.path).parent, store.run_id)
            return _drive(view, store, task, plan, changes, bool(options.resume))
        except StoreError as exc:
            if store is None or lock is None:
                raise
            # Likely unrecorded too (a full disk): the run then shows `interrupted`.
            _record_stop(store, exc)
            raise StoreError(f"run {store.run_id} stopped: {exc}, then continue it with "
                             f"--resume {store.run_id}") from exc
        except BaseException as exc:
            if store is not None and lock is not None:  # never touch a run another process drives
                _record_stop(store, exc)
            raise
        finally:
            if plan is not None:
                setup.close_judges(plan.judges)
                if plan.memory is not None:
                    plan.memory.close()
            if lock is not None:
                lock.release()
            if store is not None:
                store.close()


def _plan(task: Task, config: dict[str, Any], options: EvolveOptions,
          store: RunStore | None) -> _Plan:
    """Budget, models, judges and seeds; a resumed run's from its stored settings."""
    if store is not None:
        eval_config, search = setup.configs_from_run(config)
        llm, limits = config.get("llm", {}), config.get("budget", options.budget)
    else:
        eval_config, search, llm, limits = (options.eval, options.search, options.llm,
                                            options.budget)
    budget = setup.make_budget(limits, store)
    pool = setup.make_pool(llm, budget)
    seeds = [setup.reference_seed(task)] + setup.user_seeds(options.seeds, search.backend)
    memory, recall = setup.open_memory(options.memory, task, eval_config.precision,
                                       search.backend, store)
    if store is None and recall is not None:  # judged afresh, as every seed
        seeds += memory_seeds(recall, {seed.source for seed in seeds}, search.backend)
    if pool is None and store is None and not any(s.backend in KERNEL_BACKENDS for s in seeds):
        raise ConfigError("no LLM is configured and no Triton or CUDA starting candidate was "
                          "given: the tuner needs a working kernel to tune (--seed FILE), or "
                          "give --model and --base-url")
    # Last: a cluster's judges hold a connection, closed by run_evolve once there is a plan.
    # A new run's are made now, so a bad judge setup stores no run; a resumed run's
    # while its search asks for its first proposals, which need no judge (nor torch):
    # if they cannot be made, the search ends with that error.
    judges: list[Any] | setup.JudgesStarting = (
        setup.make_judges(task, eval_config, options.gpus, search) if store is None
        else setup.start_judges(task, eval_config, options.gpus, search))
    return _Plan(config, eval_config, search, limits, budget, pool, judges, seeds, memory,
                 recall)


def _drive(view: EvolveView, store: RunStore, task: Task, plan: _Plan,
           changes: dict[str, Any], resumed: bool) -> EvolveResult:
    """Seed or resume the stored run, then search it, shown by the view, until it stops."""
    run_id, run_dir = store.run_id, Path(store.path).parent
    if changes:
        store.set_config(plan.config)
        store.log_event(CHANGE_EVENT, {"changes": changes})
        view.notice(f"run {run_id}: settings changed on resume: {describe_changes(changes)}")
    if plan.memory is not None and not resumed:
        store.log_event(RECALL_EVENT, plan.memory.event(plan.recall))
        view.notice(f"memory: {describe_recall(plan.recall)}")
    proposer = _proposer(plan.pool, store, task, plan.search, plan.eval_config, plan.recall)
    mode = "LLM + tuner" if plan.pool else "tuner only (no LLM configured)"
    log.info("run %s: %d seed(s), budget %s, search %s", run_id, len(plan.seeds), plan.limits,
             plan.search)
    where = f" on the cluster at {plan.search.cluster}" if plan.search.cluster else ""
    isolation = describe_here(plan.eval_config.isolate_network)  # a confined probe's layers
    workers = (f"{len(plan.judges)} evaluation worker(s)" if isinstance(plan.judges, list)
               else "evaluation workers starting")
    view.notice(f"run {run_id} in {run_dir} ({mode}); {workers}{where}; "
                f"isolation{' here' if where else ''}: {isolation}")
    if isinstance(plan.judges, list):
        evolution = Evolution(store, plan.judges, plan.search, plan.budget, proposer)
    else:
        evolution = Evolution(store, [], plan.search, plan.budget, proposer,
                              start_judges=plan.judges.begin)
    if plan.memory is not None:
        evolution.on_elite = plan.memory.on_elite(run_id)
    if resumed:
        spent = spent_notice(store, plan.limits)
        if spent:
            view.notice(spent)
        evolution.resume()
    else:
        evolution.seed(plan.seeds)
    store.set_status("running")
    with view.searching(run_id, mode) as on_progress:
        evolution.on_progress = on_progress
        try:
            result = _search_until_stopped(evolution, plan.pool, run_id)
        finally:
            for judge in setup.judges_made(plan.judges):  # their standby workers end with it
                getattr(judge, "close", lambda: None)()
            _remember(store, plan.memory)
    store.set_status("finished")
    outcome = result.outcome
    log.info("run %s stopped (%s): %s", run_id, outcome.status if outcome else "-",
             result.message)
    return EvolveResult(run_id, run_dir, result)


def spent_notice(store: RunStore, limits: dict[str, Any]) -> str | None:
    """What a resumed run has been charged, the estimates apart, against its token budget."""
    totals = store.totals()
    spent = totals.tokens_in + totals.tokens_out
    if not spent:
        return None
    budget = f" of a budget of {limits['tokens']:,}" if limits.get("tokens") is not None else ""
    estimated = (f", {totals.estimated_tokens:,} of them estimated (not reported by the server: "
                 "guessed from the text, or a cut-off call's worst case; raise --tokens if "
                 "they were billed less)"
                 if totals.estimated_tokens else "")
    return f"run {store.run_id} has been charged {spent:,} tokens{budget}{estimated}"


def _remember(store: RunStore, memory: Any) -> None:
    """Record what the run learned in the memory; a memory that fails costs only that."""
    if memory is None:
        return
    try:
        recorded = memory.record(store)
        store.log_event(RECORD_EVENT, {"store": str(memory.store.path), **recorded.payload()})
    except MemoryStoreError as exc:
        log.warning("memory: %s", exc)
        store.log_event(ERROR_EVENT, {"error": str(exc)[:2000]})


def _note_unrecorded_stop(store: RunStore) -> None:
    """Record that the run's last driver ended without saying so (found `running`, unlocked)."""
    if store.run_info().status == "running":
        store.log_event("interrupted", {"signal": None, "cause": UNRECORDED_STOP})


def _record_stop(store: RunStore, error: BaseException) -> None:
    """Mark a run that stopped on an error or a signal `interrupted`, with why, in run.db."""
    try:
        if isinstance(error, KeyboardInterrupt):
            signal_name = "SIGTERM" if isinstance(error, Terminated) else "SIGINT"
            store.log_event("interrupted", {"signal": signal_name})
        else:
            store.log_event("failed", {"error": f"{type(error).__name__}: {error}"[:2000]})
        if store.run_info().status == "running":
            store.set_status("interrupted")
    except StoreError as unrecorded:
        # A full disk: the run, left `running` in run.db, shows `interrupted` once
        # this process ends; the error being raised already says why.
        log.debug("could not record the stop of run %s: %s", store.run_id, unrecorded)


def _search_until_stopped(evolution: Evolution, pool: Any, run_id: str) -> Progress:
    """The search in its own event loop; SIGTERM stops it as Ctrl-C does, killing judges' jobs."""
    terminated = threading.Event()
    try:
        return asyncio.run(_search(evolution, pool, terminated))
    except asyncio.CancelledError:
        if terminated.is_set():
            raise Terminated(f"run {run_id} interrupted by SIGTERM; continue it with "
                             f"--resume {run_id}") from None
        raise
    finally:
        sandbox.allow_jobs()


async def _search(evolution: Evolution, pool: Any, terminated: threading.Event) -> Progress:
    """The search, then the model pool's connections closed inside the same event loop."""
    loop = asyncio.get_running_loop()
    search = asyncio.current_task()

    def stop() -> None:
        terminated.set()
        sandbox.stop_all_jobs()  # the judging threads return now, not after their evaluations
        if search is not None:
            search.cancel()

    # Handled inside the loop: a signal handler that raised would land in any await.
    with on_sigterm(lambda signum, frame: loop.call_soon_threadsafe(stop)):
        try:
            return await evolution.run()
        finally:
            if pool is not None:
                await pool.aclose()


def _proposer(pool: Any, store: Any, task: Task, search: SearchConfig,
              eval_config: EvalConfig, recall: Any = None) -> Any:
    if pool is None:
        return None
    from kernelevo.propose.prompt import Remembered

    from kernelevo.search.proposals import LLMProposer

    gpu = setup.gpu_name()
    return LLMProposer(pool, store, task.source, search.backend, eval_config.precision,
                       search.max_output_tokens, random.Random(search.seed + 7),
                       search.diff_probability, gpu,
                       remembered=tuple(Remembered(kernel.label, kernel.source)
                                        for kernel in (recall.kernels if recall else ())),
                       lessons=recall.lessons if recall else "",
                       backward=eval_config.backward or task.asks_backward,
                       tolerance=tolerances(PRECISIONS[eval_config.precision],
                                            *task.declared_tolerance(), eval_config))
