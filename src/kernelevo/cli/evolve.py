"""`kernelevo evolve`'s view of a run: its notices and a live progress table, on a console.

The run itself is driven by evolve_driver.py, which the API calls too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from kernelevo.report.units import duration
from kernelevo.run.driver import UNRECORDED_STOP, EvolveResult  # noqa: F401 (re-exported)
from kernelevo.run.driver import run_evolve as drive
from kernelevo.run.setup import EvolveOptions
from kernelevo.run.view import tokens_text
from kernelevo.search.outcome import Progress


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
    if progress.by_origin:
        table.add_row("of which", progress.origins_text())
    table.add_row("tokens / cost", f"{tokens_text(progress.tokens, progress.estimated_tokens)}"
                  f" / ${progress.cost_usd:.4f}")
    table.add_row("elapsed", f"{duration(progress.elapsed_s)}; judges busy "
                  f"{progress.gpu_busy_share:.0%}; queued {progress.queued}; "
                  f"LLM calls in flight {progress.llm_in_flight}")
    if progress.message:
        table.add_row("status", escape(progress.message))  # server text may hold [brackets]
    return table


class LiveView:
    """Notices printed as they are (paths and server text may hold [brackets]), and a live
    table while the search runs."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def notice(self, text: str) -> None:
        self.console.print(text, markup=False)

    @contextmanager
    def searching(self, run_id: str, mode: str) -> Iterator[Callable[[Progress], None]]:
        with Live(progress_table(Progress(), run_id, mode), console=self.console,
                  refresh_per_second=2) as live:
            yield lambda progress: live.update(progress_table(progress, run_id, mode))


def run_evolve(console: Console, task: Any, options: EvolveOptions) -> EvolveResult:
    """Create or resume a run and search it, shown on `console` (evolve_driver.run_evolve)."""
    return drive(task, options, LiveView(console))
