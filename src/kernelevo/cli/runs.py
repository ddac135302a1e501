"""The commands that read stored runs: runs | show | export | report | ui | migrate."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from kernelevo.cli.options import (EXIT_FAILED, console, fail, judge_progress, out,
                                   print_json)
from kernelevo.errors import KernelEvoError

_RUN_ARGUMENT = typer.Argument(..., metavar="RUN", help="run id, part of it, or its folder")
_RUNS_DIR = typer.Option(None, "--runs-dir", envvar="KERNELEVO_RUNS_DIR", metavar="DIR",
                         help="where runs are stored (default ./runs)")


def runs_command(runs_dir: Optional[Path] = _RUNS_DIR,
                 as_json: bool = typer.Option(False, "--json", help="print the runs as a "
                                              "JSON list")) -> None:
    """List the runs with their best speedups, tokens and cost.

    A run is `running` only while a process drives it: one whose driver was
    killed outright (SIGKILL, out of memory) shows `interrupted`, as a stopped
    run does, and continues with --resume.
    """
    from kernelevo.run.view import (check_runs_dir, default_runs_dir, list_runs_table,
                                    not_runs_note)

    try:
        folder = check_runs_dir(runs_dir or default_runs_dir(), missing_ok=True)
        if as_json:
            from kernelevo.run.as_json import runs_json

            print_json(runs_json(folder))
        else:
            list_runs_table(out, folder)
    except KernelEvoError as exc:
        fail(exc)
    note = not_runs_note(folder)
    if note:  # on stderr: the list itself stays what a script reads
        console.print(f"note: {escape(note)}")


def show_command(run: str = _RUN_ARGUMENT,
                 runs_dir: Optional[Path] = _RUNS_DIR,
                 as_json: bool = typer.Option(False, "--json", help="print the run's settings, "
                                              "spend, ranking and best verdict as JSON")) -> None:
    """Summarise one run: settings, spending, the best candidates and the best verdict."""
    from kernelevo.run.view import default_runs_dir, open_run, show_run

    try:
        if as_json:
            from kernelevo.run.as_json import run_json

            with open_run(runs_dir or default_runs_dir(), run) as store:
                print_json(run_json(store))
        else:
            show_run(out, runs_dir or default_runs_dir(), run)
    except KernelEvoError as exc:
        fail(exc)


def export_command(
    run: str = _RUN_ARGUMENT,
    output: Path = typer.Option(..., "-o", "--output", metavar="FILE", help="file to write"),
    best: bool = typer.Option(False, "--best", help="export the fastest correct candidate"),
    candidate: Optional[str] = typer.Option(None, "--candidate", metavar="ID",
                                            help="candidate id"),
    no_recheck: bool = typer.Option(False, "--no-recheck", help="skip judging the exported "
                                    "file again"),
    force: bool = typer.Option(False, "--force", help="overwrite the output file if it exists"),
    runs_dir: Optional[Path] = _RUNS_DIR,
) -> None:
    """Write a candidate as a standalone KernelBench file, re-judged on the way out."""
    from kernelevo.render import print_verdict
    from kernelevo.run.view import default_runs_dir, export_candidate

    try:
        with console.status("re-checking the candidate") as status:
            path, verdict = export_candidate(runs_dir or default_runs_dir(), run, output,
                                             candidate, best, recheck=not no_recheck,
                                             progress=judge_progress(status), force=force)
    except KernelEvoError as exc:
        fail(exc)
    out.print(f"wrote {escape(str(path))}")
    if verdict is not None:
        print_verdict(out, path.name, verdict, brief=console.quiet)
        if not verdict.ok:
            raise typer.Exit(EXIT_FAILED)


def report_command(
    runs: list[str] = typer.Argument(..., metavar="RUN", help="run id(s) or folder(s); "
                                     "two or more make a comparison"),
    output: Path = typer.Option(Path("report.html"), "-o", "--output", metavar="FILE",
                                help="HTML file to write"),
    force: bool = typer.Option(False, "--force", help="overwrite the output file if it exists"),
    runs_dir: Optional[Path] = _RUNS_DIR,
) -> None:
    """Write a self-contained HTML report of a run, or a comparison of several runs."""
    from kernelevo.report import write_comparison, write_report
    from kernelevo.run.view import default_runs_dir, open_run, refuse_to_overwrite

    try:
        if not force:
            refuse_to_overwrite(output)
        paths = []
        for run in runs:
            with open_run(runs_dir or default_runs_dir(), run) as store:
                paths.append(store.path)
        written = (write_report(paths[0], output) if len(paths) == 1
                   else write_comparison(paths, output))
    except KernelEvoError as exc:
        fail(exc)
    out.print(f"wrote {escape(str(written))}")


def ui_command(
    runs_dir: Optional[Path] = _RUNS_DIR,
    host: str = typer.Option("127.0.0.1", help="address to bind (keep 127.0.0.1; forward the "
                             "port over SSH); beyond loopback the UI asks for a token, "
                             "printed in its URL (KERNELEVO_UI_TOKEN to choose it)"),
    port: int = typer.Option(8765, min=0, max=65535,
                             help="port to serve on (0: any free port)"),
    open_browser: bool = typer.Option(False, "--open", help="open the UI in a browser"),
) -> None:
    """Serve a local web UI that lists runs and follows them live."""
    from kernelevo.report import serve
    from kernelevo.run.view import check_runs_dir, default_runs_dir

    try:
        # A folder given must be one; the default may not exist yet (runs appear as they start).
        serve(check_runs_dir(runs_dir or default_runs_dir(), missing_ok=runs_dir is None),
              host, port, open_browser)
    except KernelEvoError as exc:
        fail(exc)


def migrate_command(run: str = typer.Argument(..., help="run id, part of it, or its folder"),
                    runs_dir: Optional[Path] = _RUNS_DIR) -> None:
    """Bring a run made by an older KernelEvo up to date: its indexes and running totals.

    Reading a run (runs, show, export, report, ui) never writes to its run.db;
    an older one is read as it is, more slowly. This, or --resume, migrates it.
    """
    from kernelevo.run.view import default_runs_dir, migrate_run

    try:
        out.print(escape(migrate_run(runs_dir or default_runs_dir(), run)))
    except KernelEvoError as exc:
        fail(exc)
