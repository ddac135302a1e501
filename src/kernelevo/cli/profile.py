"""`kernelevo profile TASK CANDIDATE`: judge a candidate and print its full profile.

The profile is the one the judge takes after timing (torch.profiler and the
analytic roofline); with `--ncu` (the default where `ncu` is on PATH) Nsight
Compute then measures the top kernels in a process of its own.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelevo.cli.options import (CONFIG_OPTION, KERNELBENCH_OPTION,
                                   MAX_INPUT_ELEMENTS_OPTION, PRECISION_OPTION, TASK_ARGUMENT,
                                   Precision, at_most, choice_value, console, eval_overrides,
                                   eval_settings, fail, out)
from kernelevo.errors import ConfigError, KernelEvoError
from kernelevo.evaluate.analysis.profile import Profile, pct, table_lines
from kernelevo.paths import check_file

NCU_TOP_KERNELS = 3
EVAL_TABLE_ROWS = 5


def print_profile(target: Console, profile: Profile, full: bool = False) -> None:
    """The profile as a table of kernels, then its diagnosis and roofline lines."""
    parts = profile.breakdown
    if parts is not None and parts.kernels:
        table = Table(title="kernels per call", title_justify="left")
        for column in ("kernel", "share", "us/call", "launches", "grid", "block"):
            table.add_column(column, justify="left" if column == "kernel" else "right")
        rows = parts.kernels if full else parts.kernels[:EVAL_TABLE_ROWS]
        for row in rows:
            table.add_row(escape(row.name[:60]) + (" *" if row.own else ""), pct(row.share),
                          f"{row.us_per_call:.1f}", f"{row.launches_per_call:g}",
                          _dims(row.grid), _dims(row.block))
        table.caption = (f"* the candidate's own; {parts.outside_us_per_call:.1f} us per call "
                         "outside kernels" + ("" if full or len(parts.kernels) <= len(rows)
                                              else f"; {len(parts.kernels) - len(rows)} more"))
        target.print(table)
    for line in table_lines(profile, full):
        if not line.startswith("  "):  # kernel rows are in the table
            target.print(escape(line))


def profile_command(
    task: str = TASK_ARGUMENT,
    candidate: Path = typer.Argument(..., metavar="CANDIDATE",
                                     help="candidate file defining ModelNew"),
    precision: Optional[Precision] = PRECISION_OPTION,
    ncu: Optional[bool] = typer.Option(None, "--ncu/--no-ncu", help="Nsight Compute metrics "
                                       "for the top kernels (default: where ncu is on PATH)"),
    ncu_path: Optional[str] = typer.Option(None, help="the ncu binary (default: from PATH)"),
    as_json: bool = typer.Option(False, "--json", help="print the profile as JSON"),
    kernelbench_dir: Optional[str] = KERNELBENCH_OPTION,
    max_input_elements: Optional[int] = MAX_INPUT_ELEMENTS_OPTION,
    config_file: Optional[str] = CONFIG_OPTION,
) -> None:
    """Judge a candidate and print where its time goes: kernels, roofline, ncu metrics."""
    import shutil

    from kernelevo.candidate import load_candidate
    from kernelevo.evaluate.parent.judge import Judge
    from kernelevo.task import load_task

    try:
        if ncu_path is not None and ncu is not False:
            _check_ncu_path(ncu_path)
        config = eval_settings(config_file, eval_overrides(precision))
        loaded_task = at_most(load_task(task, kernelbench_dir), max_input_elements)
        loaded = load_candidate(candidate)
        with console.status("judging"):
            verdict = Judge(loaded_task, config).evaluate(loaded)
    except KernelEvoError as exc:
        fail(exc)
    profile = verdict.profile
    if profile is None or not verdict.ok:
        fail(KernelEvoError(f"no profile: the candidate is {verdict.status} ({verdict.reason}): "
                            f"{verdict.message[:300]}; only a passing candidate is profiled"))
    wanted = ncu if ncu is not None else bool(ncu_path or shutil.which("ncu"))
    if wanted and profile.breakdown is None:
        asked = "--ncu" if ncu else f"--ncu-path {ncu_path}" if ncu_path else ""
        if asked:  # asked for by name: say why it did not run
            console.print(f"{escape(asked)}: Nsight Compute was not run: the profile has no "
                          "kernel breakdown to measure (judged without a GPU)")
    if wanted and profile.breakdown is not None:
        profile = _with_ncu(profile, loaded_task.path, str(candidate),
                            choice_value(precision) or config.precision, ncu_path)
    if as_json:
        out.print_json(json.dumps(profile.to_dict()))
        return
    print_profile(out, profile, full=True)


def _check_ncu_path(ncu_path: str) -> None:
    """--ncu-path must be a program this process may run."""
    fix = "give the path of Nsight Compute's ncu program, or leave out --ncu-path to use ncu "\
          "from PATH"
    path = check_file(ncu_path, "--ncu-path", fix, ConfigError)
    if not os.access(path, os.X_OK):
        raise ConfigError(f"--ncu-path {path} is not executable: {fix}")


def _with_ncu(profile: Profile, task_path: str, candidate_path: str, precision: str,
              ncu_path: str | None) -> Profile:
    from kernelevo.evaluate.parent.ncu import measure

    kernels = profile.breakdown.kernels if profile.breakdown else ()
    names = [row.name for row in kernels[:NCU_TOP_KERNELS]]
    if not task_path:
        return replace(profile, notes=profile.notes + ("Nsight Compute: the task has no file "
                                                       "to run it from",))
    with console.status(f"Nsight Compute on {len(names)} kernel(s)"):
        run = measure(names, task_path, candidate_path, precision, ncu_path)
    notes = profile.notes + ((run.problem,) if run.problem else ())
    return replace(profile, ncu=run.kernels, notes=notes)


def _dims(values: tuple[int, ...]) -> str:
    return "x".join(str(v) for v in values) if values else "-"
