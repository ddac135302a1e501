"""A suite's results as JSON (suite.json), a markdown table (suite.md) and HTML (suite.html)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kernelevo.config import EvalConfig
from kernelevo.schema import settings_from_dict
from kernelevo.suite.metrics import FAST_P

if TYPE_CHECKING:
    from kernelevo.suite.metrics import SuiteResult


def _fraction(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _gain(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def as_json(result: SuiteResult) -> dict[str, Any]:
    shown = {"gpu": result.gpu, "summary": result.summary.to_dict(),
             "tasks": [asdict(t) for t in result.tasks], "rows": result.rows}
    if result.time_spent is not None:  # this run's: a resumed suite's earlier runs are not in it
        shown["time_spent"] = result.time_spent
    return shown


def summary_table(result: SuiteResult) -> str:
    """fast_p by baseline and the geometric means, as a markdown table."""
    keys = [f"{p:g}" for p in FAST_P]
    lines = ["| baseline | " + " | ".join(f"fast_{k}" for k in keys) + " | geomean (95 % CI) |",
             "|---" * (len(keys) + 2) + "|"]
    for baseline, table in result.summary.fast_p.items():
        g = result.summary.geomean[baseline]
        interval = f" ({_gain(g.low)}–{_gain(g.high)})" if g.low is not None else ""
        lines.append(f"| {baseline} | " + " | ".join(_fraction(table[k]) for k in keys)
                     + f" | {_gain(g.value)}{interval}, {g.tasks} tasks |")
    s = result.summary
    lines.append("")
    lines.append(f"correct: {s.correct} of {s.tasks} tasks ({_fraction(s.correct_fraction)})"
                 + (f"; {s.tokens} tokens, ${s.usd:.2f}" if s.tokens else ""))
    return "\n".join(lines)


def task_table(result: SuiteResult) -> str:
    lines = ["| task | samples | verdict | vs eager | vs compile |", "|---|---|---|---|---|"]
    for t in result.tasks:
        lines.append(f"| {t.key} | {t.samples} | {t.reason} | {_gain(t.speedup.get('eager'))} "
                     f"| {_gain(t.speedup.get('compile'))} |")
    return "\n".join(lines)


def render_html(result: SuiteResult, specs: list[str], measure: str) -> str:
    from kernelevo.report.html import environment

    template = environment().get_template("suite.html.j2")
    return template.render(title="KernelEvo suite", ui=False, live=None,
                           generated_at=time.time(), specs=specs, measure=measure,
                           summary=result.summary, tasks=result.tasks, rows=result.rows,
                           gpu=result.gpu, fast_keys=[f"{p:g}" for p in FAST_P],
                           fraction=_fraction)


def write_outputs(result: SuiteResult) -> None:
    plan = json.loads((result.out / "plan.json").read_text())
    (result.out / "suite.json").write_text(json.dumps(as_json(result), indent=1))
    (result.out / "suite.md").write_text(summary_table(result) + "\n\n" + task_table(result)
                                         + "\n")
    config = settings_from_dict(EvalConfig, plan["config"], "config", drop_unknown=True)
    measure = config.timing.measure
    (result.out / "suite.html").write_text(render_html(result, plan["specs"], measure))
