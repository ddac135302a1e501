"""`kernelevo evolve` and `kernelevo.evolve()`: a run from its options, with a live view."""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from kernelevo import evolve_setup as setup
from kernelevo.errors import ConfigError
from kernelevo.evaluate import sandbox
from kernelevo.evaluate.confine_probe import describe_here
from kernelevo.logs import get_logger
from kernelevo.run_lock import RunLock, acquire_run_lock
from kernelevo.run_resume import CHANGE_EVENT, apply_overrides, describe_changes
from kernelevo.run_signals import Terminated, on_sigterm, sigterm_as_interrupt
from kernelevo.search.loop import Evolution, Progress, RunOutcome, SearchConfig
from kernelevo.store import RunStore, StoreError

log = get_logger(__name__)
UNRECORDED_STOP = ("not recorded: its driver was killed outright (SIGKILL, out of memory) or "
                   "its machine stopped")


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


def progress_table(progress: Progress, run_id: str, mode: str) -> Table:
    table = Table(title=f"kernelevo evolve {run_id} ({mode})", show_header=False)
    untimed = progress.by_status.get("ok", 0) and progress.best_vs_eager is None
    best = ("- (correct candidates, but no timings: judged without a GPU)" if untimed
            else "-") if progress.best_vs_eager is None else (
        f"{progress.best_vs_eager:.2f}x vs eager, "
        + ("-" if progress.best_vs_compile is None else f"{progress.best_vs_compile:.2f}x")
        + f" vs torch.compile ({progress.best_id})")
    table.add_row("best", best)
    table.add_row("candidates", ", ".join(f"{k} {v}" for k, v in
                                          sorted(progress.by_status.items())) or "-")
    table.add_row("tokens / cost", f"{progress.tokens:,} / ${progress.cost_usd:.4f}")
    table.add_row("elapsed", f"{progress.elapsed_s:.0f} s; judges busy "
                  f"{progress.gpu_busy_share:.0%}; queued {progress.queued}; "
                  f"LLM calls in flight {progress.llm_in_flight}")
    if progress.message:
        table.add_row("status", escape(progress.message))  # server text may hold [brackets]
    return table


@dataclass(frozen=True)
class _Plan:
    """Everything a run needs that bad input can break, built before a new run is stored."""

    config: dict[str, Any]
    eval_config: Any
    search: SearchConfig
    limits: dict[str, Any]
    budget: Any
    pool: Any
    judges: list[Any]
    seeds: list[Any]


def run_evolve(console: Console, task: Any, options: dict[str, Any]) -> EvolveResult:
    """Create or resume a run and search until a budget or the work runs out.

    Flags are checked (judges, models, seeds built) before a new run is
    stored, so a bad start leaves no run behind; a run that fails or is
    stopped (Ctrl-C, SIGTERM) after that is marked `interrupted` with the reason.
    A resume given a task, seeds or settings the run may not change is refused
    before the run is locked or written (run_resume.py).
    """
    runs_dir = Path(options["runs_dir"])
    store: RunStore | None = None
    lock: RunLock | None = None
    plan: _Plan | None = None
    with sigterm_as_interrupt():
        try:
            changes: dict[str, Any] = {}
            if options.get("resume"):
                store, stored_task, config = setup.open_to_resume(runs_dir, options["resume"])
                setup.refuse_changes(store, task, options)
                task = stored_task
                lock = acquire_run_lock(Path(store.path).parent, store.run_id)
                _note_unrecorded_stop(store)
                config, changes = apply_overrides(config, options.get("overrides") or {})
            else:
                config = setup.run_config(options["eval"], options["search"], options["llm"],
                                          options["budget"])
            plan = _plan(task, config, options, store)
            if store is None:
                store = RunStore.create(runs_dir, task.name, task.source, config)
                lock = acquire_run_lock(Path(store.path).parent, store.run_id)
            return _drive(console, store, task, plan, changes, bool(options.get("resume")))
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
            if lock is not None:
                lock.release()
            if store is not None:
                store.close()


def _plan(task: Any, config: dict[str, Any], options: dict[str, Any],
          store: RunStore | None) -> _Plan:
    """Budget, models, judges and seeds; a resumed run's from its stored settings."""
    if store is not None:
        eval_config, search = setup.configs_from_run(config)
        llm, limits = config.get("llm", {}), config.get("budget", options["budget"])
    else:
        eval_config, search, llm, limits = (options["eval"], options["search"], options["llm"],
                                            options["budget"])
    budget = setup.make_budget(limits, store)
    pool = setup.make_pool(llm, budget)
    seeds = [setup.reference_seed(task)] + setup.user_seeds(options.get("seeds", []),
                                                             search.backend)
    if pool is None and store is None and not any(s.backend in ("triton", "cuda")
                                                  for s in seeds):
        raise ConfigError("no LLM is configured and no Triton or CUDA starting candidate was "
                          "given: the tuner needs a working kernel to tune (--seed FILE), or "
                          "give --model and --base-url")
    # Last: a cluster's judges hold a connection, closed by run_evolve once there is a plan.
    judges = setup.make_judges(task, eval_config, options.get("gpus"), search)
    return _Plan(config, eval_config, search, limits, budget, pool, judges, seeds)


def _drive(console: Console, store: RunStore, task: Any, plan: _Plan, changes: dict[str, Any],
           resumed: bool) -> EvolveResult:
    """Seed or resume the stored run, then search it with a live view until it stops."""
    run_id, run_dir = store.run_id, Path(store.path).parent
    if changes:
        store.set_config(plan.config)
        store.log_event(CHANGE_EVENT, {"changes": changes})
        console.print(f"run {run_id}: settings changed on resume: "
                      f"{escape(describe_changes(changes))}")
    proposer = _proposer(plan.pool, store, task, plan.search, plan.eval_config)
    mode = "LLM + tuner" if plan.pool else "tuner only (no LLM configured)"
    log.info("run %s: %d seed(s), budget %s, search %s", run_id, len(plan.seeds), plan.limits,
             plan.search)
    where = f" on the cluster at {plan.search.cluster}" if plan.search.cluster else ""
    isolation = describe_here(plan.eval_config.isolate_network)  # a confined probe's layers
    console.print(f"run {run_id} in {escape(str(run_dir))} ({mode}); "
                  f"{len(plan.judges)} evaluation worker(s){escape(where)}; isolation"
                  f"{' here' if where else ''}: {escape(isolation)}")
    evolution = Evolution(store, plan.judges, plan.search, plan.budget, proposer)
    if resumed:
        _print_spent(console, store, plan.limits)
        evolution.resume()
    else:
        evolution.seed(plan.seeds)
    store.set_status("running")
    with Live(progress_table(Progress(), run_id, mode), console=console,
              refresh_per_second=2) as live:
        evolution.on_progress = lambda p: live.update(progress_table(p, run_id, mode))
        try:
            result = _search_until_stopped(evolution, plan.pool, run_id)
        finally:
            for judge in plan.judges:  # their standby workers end with the search
                getattr(judge, "close", lambda: None)()
    store.set_status("finished")
    outcome = result.outcome
    log.info("run %s stopped (%s): %s", run_id, outcome.status if outcome else "-",
             result.message)
    return EvolveResult(run_id, run_dir, result)


def _print_spent(console: Console, store: RunStore, limits: dict[str, Any]) -> None:
    """What a resumed run has been charged, the estimates apart, against its token budget."""
    totals = store.totals()
    spent = totals.tokens_in + totals.tokens_out
    if not spent:
        return
    budget = f" of a budget of {limits['tokens']:,}" if limits.get("tokens") is not None else ""
    estimated = (f", {totals.estimated_tokens:,} of them estimated (calls cut off, charged their "
                 "worst case; raise --tokens if they were billed less)"
                 if totals.estimated_tokens else "")
    console.print(f"run {store.run_id} has been charged {spent:,} tokens{budget}{estimated}")


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


def _proposer(pool: Any, store: Any, task: Any, search: SearchConfig, eval_config: Any) -> Any:
    if pool is None:
        return None
    import torch

    from kernelevo.search.proposals import LLMProposer

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NVIDIA H200"
    return LLMProposer(pool, store, task.source, search.backend, eval_config.precision,
                       search.max_output_tokens, random.Random(search.seed + 7),
                       search.diff_probability, gpu)
