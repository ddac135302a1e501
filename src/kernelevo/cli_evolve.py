"""`kernelevo evolve` and `kernelevo.evolve()`: a run from its options, with a live view."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from kernelevo import evolve_setup as setup
from kernelevo.logs import get_logger
from kernelevo.search.loop import Evolution, Progress, RunOutcome, SearchConfig

log = get_logger(__name__)


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


def run_evolve(console: Console, task: Any, options: dict[str, Any]) -> EvolveResult:
    """Create or resume a run and search until a budget or the work runs out."""
    runs_dir = Path(options["runs_dir"])
    eval_config, search, llm, limits = (options["eval"], options["search"], options["llm"],
                                        options["budget"])
    config = setup.run_config(eval_config, search, llm, limits)
    store, task, config = setup.open_or_create(runs_dir, options.get("resume"), task, config)
    resumed = bool(options.get("resume"))
    if resumed:
        eval_config, search = setup.configs_from_run(config)
        llm, limits = config.get("llm", {}), config.get("budget", limits)
    budget = setup.make_budget(limits, store if resumed else None)
    pool = setup.make_pool(llm, budget)
    judges = setup.make_judges(task, eval_config, options.get("gpus", "all"))
    proposer = _proposer(pool, store, task, search, eval_config)
    seeds = [setup.reference_seed(task)] + setup.user_seeds(options.get("seeds", []),
                                                             search.backend)
    if pool is None and not any(s.backend in ("triton", "cuda") for s in seeds) and not resumed:
        from kernelevo.errors import ConfigError

        raise ConfigError("no LLM is configured and no Triton or CUDA starting candidate was "
                          "given: the tuner needs a working kernel to tune (--seed FILE), or "
                          "give --model and --base-url")
    mode = "LLM + tuner" if pool else "tuner only (no LLM configured)"
    run_id, run_dir = store.run_info().id, Path(store.path).parent
    log.info("run %s: %d seed(s), budget %s, search %s", run_id, len(seeds), limits, search)
    console.print(f"run {run_id} in {escape(str(run_dir))} ({mode}); "
                  f"{len(judges)} evaluation worker(s)")
    evolution = Evolution(store, judges, search, budget, proposer)
    if resumed:
        evolution.resume()
    else:
        evolution.seed(seeds)
    store.set_status("running")
    with Live(progress_table(Progress(), run_id, mode), console=console,
              refresh_per_second=2) as live:
        evolution.on_progress = lambda p: live.update(progress_table(p, run_id, mode))
        try:
            result = asyncio.run(_search(evolution, pool))
        except KeyboardInterrupt:
            store.set_status("interrupted")
            raise
    store.set_status("finished")
    outcome = result.outcome
    log.info("run %s stopped (%s): %s", run_id, outcome.status if outcome else "-",
             result.message)
    return EvolveResult(run_id, run_dir, result)


async def _search(evolution: Evolution, pool: Any) -> Progress:
    """The search, then the model pool's connections closed inside the same event loop."""
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
