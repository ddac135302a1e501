"""Pages as HTML: the report file, the web UI's pages, and run comparisons.

The report and the UI render the same templates from the same RunData; the
UI adds links between pages and a small polling script. Nothing is loaded
from outside the page (styles inline, plots inline SVG), so a report file
opens offline and can be mailed as it is.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup

import kernelevo.report.units as units
from kernelevo.errors import ConfigError
from kernelevo.evaluate.verdict import REASONS
from kernelevo.report.data import Improvement, RunData, load_run
from kernelevo.report.detail import CandidateDetail, prompt_messages
from kernelevo.report.diff import diff_html
from kernelevo.report.highlight import highlight
from kernelevo.report.svg import (PALETTE, STATUS_COLORS, Link, Series, cell_grids, status_plot,
                                  step_plot)

TEMPLATES = Path(__file__).parent / "templates"


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    env.filters.update(speedup=units.speedup, usd=units.usd, tokens=units.tokens,
                       duration=units.duration, ms=units.milliseconds, when=units.when,
                       highlight=highlight, limit=_limit)
    env.globals.update(status_colors=STATUS_COLORS, reasons=REASONS,
                       prompt_messages=prompt_messages)
    return env


def warm_templates() -> None:
    """Compile every page's template now (about 0.1 s), not on the first request for it."""
    env = environment()
    for template in sorted(TEMPLATES.glob("*.j2")):
        env.get_template(template.name)


def _limit(value: float | None, kind: str) -> str:
    shows = {"tokens": units.tokens, "usd": units.usd, "duration": units.duration}
    return units.limit(value, shows[kind])


UNTIMED_NOTE = ("Judged without a GPU: every candidate's correctness and honesty were "
                "checked (on the CPU, at smaller sizes); nothing was timed, so there are no "
                "speedups and no speedup plots; the run's best, and each archive cell's elite, "
                "is the first correct kernel judged.")


def run_timed(data: RunData) -> bool:
    """Whether the run was judged where kernels are timed (a GPU); unknown before a verdict.

    A verdict's environment says so; without one, an untimed best kernel does.
    """
    if data.environment:
        return bool(data.environment.get("gpu"))
    return data.best is None or data.best.timed


def run_plots(data: RunData, link: Link | None = None) -> dict[str, Markup | str]:
    """The run's plots by name: best-so-far against spend, statuses over time; a note as text."""
    def lines(x_of: Callable[[Improvement], float], end: float) -> list[Series]:
        return [Series(label, tuple((x_of(step), step.speedup, step.candidate_id)
                                    for step in data.improvements_of(metric)), end, color)
                for label, metric, color in (("vs eager", "speedup_vs_eager", PALETTE[0]),
                                             ("vs torch.compile", "speedup_vs_compile",
                                              PALETTE[1]))]

    if not run_timed(data):  # every speedup plot would be an empty box: one note instead
        return {"tokens": Markup(""), "dollars": Markup(""), "time": Markup(""),
                "status": status_plot(data.timeline, title="candidates by status over time",
                                      x_format=units.duration),
                "untimed": UNTIMED_NOTE}
    return {
        "untimed": "",
        "tokens": step_plot(lines(lambda s: s.tokens, data.tokens), link=link,
                            title="best-so-far speedup against tokens", x_label="tokens",
                            x_format=units.tokens),
        "dollars": step_plot(lines(lambda s: s.cost_usd, data.cost_usd), link=link,
                             title="best-so-far speedup against dollars", x_label="dollars",
                             x_format=units.usd),
        "time": step_plot(lines(lambda s: s.elapsed_s, data.span_s), link=link,
                          title="best-so-far speedup against wall time", x_label="wall time",
                          x_format=units.duration),
        "status": status_plot(data.timeline, title="candidates by status over time",
                              x_format=units.duration),
    }


def comparison_plot(runs: Sequence[RunData], link: Link | None = None) -> Markup:
    """Best-so-far speedup over eager against tokens, one line per run."""
    series = [Series(run.run_id, tuple((s.tokens, s.speedup, s.candidate_id)
                                       for s in run.improvements_of("speedup_vs_eager")),
                     run.tokens, PALETTE[index % len(PALETTE)])
              for index, run in enumerate(runs)]
    return step_plot(series, title="best-so-far speedup vs eager against tokens",
                     x_label="tokens", x_format=units.tokens, link=link)


def _best_views(data: RunData) -> dict[str, Any]:
    best = data.best
    if best is None:
        return {"best_code": None, "parent_diff": None, "reference_diff": None}
    source = best.stored.candidate.source
    parent = best.parent
    return {
        "best_code": highlight(source),
        "parent_diff": diff_html(parent.candidate.source, source, parent.id, best.stored.id)
        if parent else None,
        "reference_diff": diff_html(best.reference_source, source, "reference",
                                    best.stored.id),
    }


def _run_context(data: RunData, ui: bool) -> dict[str, Any]:
    link = _candidate_link(data.run_id) if ui else None
    return {"data": data, "plots": run_plots(data, link), "ui": ui,
            "grids": cell_grids(data.islands, link, timed=run_timed(data)),
            "table": data.table,
            "link": link or (lambda _id: None),
            "generated_at": time.time(), **_best_views(data)}


def render_report(data: RunData) -> str:
    """The self-contained report of one run."""
    return environment().get_template("run.html.j2").render(
        title=f"KernelEvo report: {data.task_name} ({data.run_id})", live=None,
        **_run_context(data, ui=False))


def render_run_page(data: RunData) -> str:
    """The UI's page of one run: the report's views, linked, refreshing while it runs."""
    return environment().get_template("run.html.j2").render(
        title=f"{data.task_name} ({data.run_id})", live=_live(data.run_id),
        **_run_context(data, ui=True))


def render_candidate_page(detail: CandidateDetail) -> str:
    stored = detail.stored
    source = stored.candidate.source
    return environment().get_template("candidate.html.j2").render(
        title=f"{stored.id} of {detail.run_id}", detail=detail, stored=stored,
        verdict=stored.verdict, code=highlight(source), live=_live(detail.run_id), ui=True,
        link=_candidate_link(detail.run_id), run_href=f"/run/{quote(detail.run_id)}",
        parent_diff=diff_html(detail.parent.candidate.source, source, detail.parent.id,
                              stored.id) if detail.parent else None,
        reference_diff=diff_html(detail.reference_source, source, "reference", stored.id))


def render_comparison(runs: Sequence[RunData], ui: bool = False) -> str:
    """Several runs side by side: one plot of their best-so-far lines, and a table."""
    return environment().get_template("compare.html.j2").render(
        title="KernelEvo comparison: " + ", ".join(run.run_id for run in runs), runs=runs,
        ui=ui, live=None, plot=comparison_plot(runs), generated_at=time.time(), quote=quote)


def render_index(runs_dir: Path, summaries: Sequence[Any], runs: Sequence[RunData]) -> str:
    """The UI's front page: every run, and their best-so-far lines on one plot."""
    return environment().get_template("index.html.j2").render(
        title="KernelEvo runs", runs_dir=str(runs_dir), summaries=summaries, ui=True,
        live=None, plot=comparison_plot(runs) if runs else None, quote=quote)


def write_report(run_path: Path, output: Path) -> Path:
    """Write the HTML report of the run at `run_path` (folder or run.db) to `output`."""
    return _write(Path(output), render_report(load_run(Path(run_path))))


def write_comparison(run_paths: list[Path], output: Path) -> Path:
    """Write one HTML page comparing several runs side by side."""
    if not run_paths:
        raise ConfigError("no runs to compare: give at least one run")
    runs = [load_run(Path(path), views=False) for path in run_paths]
    return _write(Path(output), render_comparison(runs))


def _candidate_link(run_id: str) -> Link:
    return lambda candidate_id: f"/run/{quote(run_id)}/candidate/{quote(candidate_id)}"


def _live(run_id: str) -> dict[str, str]:
    return {"summary_url": f"/api/run/{quote(run_id)}/summary"}


def _write(output: Path, text: str) -> Path:
    """Write atomically, so a reader never opens half a report."""
    temporary = None
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, 0o644)  # mkstemp makes it private; a report is meant to be shared
        os.replace(temporary, output)
    except OSError as exc:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        raise ConfigError(f"cannot write {output}: {exc}") from exc
    return output
