"""Readable terminal output of verdicts and comparisons."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelevo.evaluate.verdict import TimingStats, Verdict, speedup

_STATUS_STYLE = {"ok": "bold green", "skipped": "yellow"}
_MEASURE_TITLES = {"gpu": "GPU time", "call": "call time", "kernelbench": "KernelBench time"}


def _timing_text(stats: TimingStats | None) -> str:
    if stats is None:
        return "-"
    spread = stats.iqr_ms / stats.median_ms if stats.median_ms else 0.0
    return (f"{stats.median_ms:.4f} ms  (IQR {stats.iqr_ms:.4f} ms, {spread:.1%}; "
            f"n={stats.samples}, {stats.method})")


def print_verdict(console: Console, name: str, verdict: Verdict) -> None:
    style = _STATUS_STYLE.get(verdict.status, "bold red")
    if verdict.ok and not verdict.passed_kernel:
        style = "bold yellow"
    console.print(f"[{style}]{verdict.status.upper()}[/]  {escape(name)}: {verdict.reason}")
    if verdict.message and not verdict.passed_kernel:
        console.print(verdict.message, markup=False)
    if verdict.errors is not None:
        e = verdict.errors
        console.print(f"error: max abs {e.max_abs_error:.3g}, max rel {e.max_rel_error:.3g}, "
                      f"mismatch {e.mismatch_fraction:.2%}, rel L2 {e.rel_l2_error:.3g} "
                      f"(atol {e.atol:g}, rtol {e.rtol:g})")
    measures = verdict.measures or ({verdict.timing_measure or "gpu": verdict.timings}
                                    if verdict.timings else {})
    for measure, stats in measures.items():
        used = " (speedups use it)" if measure == verdict.timing_measure else ""
        table = Table(show_header=True, header_style="bold",
                      title=f"{_MEASURE_TITLES.get(measure, measure)}{used}", title_justify="left")
        table.add_column("contestant")
        table.add_column("median time")
        table.add_column("speedup of candidate")
        own = stats.get("candidate")
        for contestant, values in stats.items():
            gain = speedup(values, own) if own is not None and contestant != "candidate" else None
            table.add_row(escape(contestant), _timing_text(values),
                          f"{gain:.2f}x" if gain else "")
        console.print(table)
    timed_under = verdict.environment.get("timed_under")
    if timed_under and measures:
        console.print(f"[dim]timed under {escape(timed_under)}[/]")
    for flag in verdict.flags:
        console.print(f"[yellow]flag:[/] {escape(flag)}")
    for note in verdict.notes:
        console.print(f"[dim]note:[/] {escape(note)}")
    worker = verdict.environment.get("judge_worker")
    if worker:  # judged on a cluster
        host = verdict.environment.get("judge_host", "")
        console.print(f"[dim]judged by cluster worker {escape(worker)}"
                      + (f" on {escape(host)}" if host else "") + "[/]")
    if verdict.phases_s:
        console.print("[dim]phases (s): " + ", ".join(f"{k} {v:.2f}"
                                                     for k, v in verdict.phases_s.items()) + "[/]")
    if verdict.logs and verdict.status in ("compile_error", "runtime_error", "crashed"):
        console.print("[dim]log tail:[/]")
        console.print(verdict.logs[-3000:], markup=False, highlight=False)


def print_comparison(console: Console, name_a: str, name_b: str, result: Any) -> None:
    print_verdict(console, f"A {name_a}", result.a)
    console.print()
    print_verdict(console, f"B {name_b}", result.b)
    console.print()
    if result.faster is None:
        console.print("no speed comparison: both candidates must pass with timings")
        return
    winner = name_a if result.faster == "a" else name_b
    verdict = "exceeds" if result.significant else "is within"
    console.print(f"[bold]{escape(winner)}[/] is faster by {result.ratio:.3f}x; the difference "
                  f"({result.ratio - 1:.1%}) {verdict} the measured noise ({result.noise:.1%})")
