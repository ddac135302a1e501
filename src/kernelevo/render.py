"""Readable terminal output of verdicts and comparisons."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from kernelevo.config import measure_heading
from kernelevo.evaluate.verdict import TimingStats, Verdict, speedup, workload_measure

_STATUS_STYLE = {"ok": "bold green", "skipped": "yellow"}


def _timing_text(stats: TimingStats | None) -> str:
    if stats is None:
        return "-"
    spread = stats.iqr_ms / stats.median_ms if stats.median_ms else 0.0
    return (f"{stats.median_ms:.4f} ms  (IQR {stats.iqr_ms:.4f} ms, {spread:.1%}; "
            f"n={stats.samples}, {stats.method})")


def print_verdict(console: Console, name: str, verdict: Verdict, brief: bool = False) -> None:
    """The verdict; `brief` (--quiet) keeps its status line, why it failed and its speedups."""
    style = _STATUS_STYLE.get(verdict.status, "bold red")
    if verdict.ok and not verdict.passed_kernel:
        style = "bold yellow"
    console.print(f"[{style}]{verdict.status.upper()}[/]  {escape(name)}: {verdict.reason}")
    if verdict.message and not verdict.passed_kernel:
        console.print(verdict.message, markup=False)
    if brief:
        _print_speedups(console, verdict)
        return
    if verdict.errors is not None:
        e = verdict.errors
        console.print(f"accuracy: max abs error {e.max_abs_error:.3g}, max rel "
                      f"{e.max_rel_error:.3g}, mismatch {e.mismatch_fraction:.2%}, "
                      f"rel L2 {e.rel_l2_error:.3g} (atol {e.atol:g}, rtol {e.rtol:g})")
    _print_timings(console, verdict)
    _print_remarks(console, verdict)


def _print_speedups(console: Console, verdict: Verdict) -> None:
    """One line of speedups, when the verdict has any."""
    ranges = verdict.speedup_ranges.get(verdict.timing_measure, {})
    gains = [f"{value:.2f}x vs {baseline}{_range_text(ranges.get(key))}" for baseline, key, value in
             (("eager", "eager", verdict.speedup_vs_eager),
              ("torch.compile", "compile", verdict.speedup_vs_compile))
             if value]
    if gains:
        measure = measure_heading(verdict.timing_measure)
        console.print("speedup: " + ", ".join(gains) + (f" ({measure})" if measure else ""))
    for workload in ("train", "backward"):  # a task whose backward is judged
        key = workload_measure(workload, verdict.timing_measure)
        ranges = verdict.speedup_ranges.get(key, {})
        gains = [f"{value:.2f}x vs {title}{_range_text(ranges.get(baseline))}"
                 for title, baseline in (("eager", "eager"), ("torch.compile", "compile"))
                 for value in [verdict.speedup_in(key, baseline)] if value]
        if gains:
            console.print(f"{workload} speedup: " + ", ".join(gains)
                          + f" ({measure_heading(key)})")


def _range_text(interval: list[float] | None) -> str:
    """' (0.95-1.10x)': the speedups a rerun can show; '' without one."""
    return f" ({interval[0]:.2f}-{interval[1]:.2f}x)" if interval else ""


def _print_timings(console: Console, verdict: Verdict) -> None:
    measures = verdict.measures or ({verdict.timing_measure or "gpu": verdict.timings}
                                    if verdict.timings else {})
    for measure, stats in measures.items():
        used = " (speedups use it)" if measure == verdict.timing_measure else ""
        table = Table(show_header=True, header_style="bold",
                      title=f"{measure_heading(measure)}{used}", title_justify="left")
        table.add_column("contestant")
        table.add_column("median time")
        table.add_column("speedup of candidate (a rerun's range)")
        own = stats.get("candidate")
        ranges = verdict.speedup_ranges.get(measure, {})
        for contestant, values in stats.items():
            gain = speedup(values, own) if own is not None and contestant != "candidate" else None
            table.add_row(escape(contestant), _timing_text(values),
                          f"{gain:.2f}x{_range_text(ranges.get(contestant))}" if gain else "")
        console.print(table)
    timed_under = verdict.environment.get("timed_under")
    if timed_under and measures:
        console.print(f"[dim]timed under {escape(timed_under)}[/]")


def _print_remarks(console: Console, verdict: Verdict) -> None:
    """Flags, notes, where it was judged, the phases' seconds and a failure's log tail."""
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
        console.print("[dim]phases (s): " + ", ".join(
            f"{k} {v:.2f}" for k, v in verdict.phases_s.items()
            if not k.startswith(("recheck_", "gate_wait_"))) + "[/]")  # details: JSON only
    if verdict.logs and verdict.status in ("compile_error", "runtime_error", "crashed"):
        console.print("[dim]log tail:[/]")
        console.print(verdict.logs[-3000:], markup=False, highlight=False)


def distinct_names(first: Path, second: Path) -> tuple[str, str]:
    """Names for two candidate files: their stems, or as much of their paths as tells them apart."""
    if first.stem != second.stem:
        return first.stem, second.stem
    parts_a, parts_b = first.absolute().parts, second.absolute().parts
    for count in range(1, max(len(parts_a), len(parts_b)) + 1):
        a, b = "/".join(parts_a[-count:]), "/".join(parts_b[-count:])
        if a != b:
            return a, b
    return first.stem, second.stem  # one file given twice: A and B tell them apart


def print_comparison(console: Console, name_a: str, name_b: str, result: Any,
                     brief: bool = False) -> None:
    print_verdict(console, f"A {name_a}", result.a, brief)
    if not brief:
        console.print()
    print_verdict(console, f"B {name_b}", result.b, brief)
    if not brief:
        console.print()
    if result.faster is None:
        console.print("no speed comparison: both candidates must pass with timings")
        return
    winner = name_a if result.faster == "a" else name_b
    verdict = "exceeds" if result.significant else "is within"
    console.print(f"[bold]{escape(winner)}[/] is faster by {result.ratio:.3f}x; the difference "
                  f"({result.ratio - 1:.1%}) {verdict} the measured noise ({result.noise:.1%})")


def fitted_table(console: Console, headers: Sequence[str], rows: list[list[str]],
                 priority: Sequence[int], right_from: int) -> tuple[Table, list[str]]:
    """A table of `rows` that fits the console without cutting a cell, and the headers left out.

    Every column that fits is shown as one table with borders; at narrower widths
    the table loses its vertical borders, then the columns last in `priority`, so
    each cell shown stays whole instead of every cell cut to two characters.
    """
    wide = _table(headers, rows, range(len(headers)), right_from, bordered=True)
    if _natural_width(console, wide) <= console.width:
        return wide, []
    for count in range(len(priority), 0, -1):
        shown = sorted(priority[:count])
        table = _table(headers, rows, shown, right_from, bordered=False)
        if _natural_width(console, table) <= console.width or count == 1:
            return table, [headers[i] for i in range(len(headers)) if i not in shown]
    raise ValueError("fitted_table needs at least one column in priority")


def _table(headers: Sequence[str], rows: list[list[str]], shown: Iterable[int],
           right_from: int, bordered: bool) -> Table:
    table = (Table(header_style="bold") if bordered else
             Table(header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False))
    shown = list(shown)
    for index in shown:
        # Cells never wrap: cut to fit they read "so…"; a long header takes two lines.
        header = headers[index] if bordered else _stacked(headers[index])
        table.add_column(header, justify="left" if index < right_from else "right",
                         no_wrap=True)
    for row in rows:
        table.add_row(*(row[index] for index in shown))
    return table


def _stacked(header: str) -> str:
    """A header of several words over two lines ("best vs eager" as "best vs" and "eager")."""
    head, _, last = header.rpartition(" ")
    return f"{head}\n{last}" if head and len(header) > 8 else header


def _natural_width(console: Console, table: Table) -> int:
    """The table's width with no cell wrapped or cut."""
    roomy = console.options.update_width(10_000)
    return Measurement.get(console, roomy, table).maximum
