"""What `kernelevo suite` prints: progress lines, then the task and summary tables or JSON."""

from __future__ import annotations

import json

from rich.console import Console

from kernelevo.suite import SuitePlan, SuiteResult, run_suite
from kernelevo.suite.render import as_json, summary_table, task_table


def run_suite_command(plan: SuitePlan, out: Console, console: Console,
                      json_output: bool) -> SuiteResult:
    """Run the suite, showing one line per judged solution on `console`."""
    result = run_suite(plan, progress=lambda line: console.print(line, markup=False,
                                                                 highlight=False))
    if json_output:
        out.print_json(json.dumps(as_json(result)))
    else:
        out.print(task_table(result), markup=False, highlight=False, soft_wrap=True)
        out.print("")
        out.print(summary_table(result), markup=False, highlight=False, soft_wrap=True)
        console.print(f"written: {plan.out}/suite.json, suite.md and suite.html",
                      markup=False, highlight=False)
    return result
