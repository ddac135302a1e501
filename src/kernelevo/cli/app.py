"""The command line: eval | compare | evolve | suite | runs | show | export | report | ui
| config
| model."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from kernelevo.cache_dir import keep_bytecode

keep_bytecode()  # before torch's imports (cache_dir.py says why)

import typer
from rich.markup import escape

from kernelevo.version import __version__
from kernelevo.cli.config import config_command
from kernelevo.cli.memory import memory_app
from kernelevo.cli.profile import print_profile, profile_command
from kernelevo.cli.model import model_app
from kernelevo.cli.serve import serve_command
from kernelevo.cli.suite import suite_command
from kernelevo.cli.options import (  # noqa: F401 (the choices, re-exported)
    ATOL_OPTION, BACKWARD_OPTION, CONFIG_OPTION, CUDA_GRAPH_OPTION, DEVICE_OPTION,
    EXIT_BAD_INPUT, EXIT_FAILED, FLAGS, KERNELBENCH_OPTION, MAX_INPUT_ELEMENTS_OPTION,
    NO_COMPILE_OPTION, NO_STATIC_OPTION, at_most,
    RTOL_OPTION, SETS_OPTION, TASK_ARGUMENT, TIMEOUT_OPTION, VARY_SHAPES_OPTION, App,
    POLICY_OPTION, PRECISION_OPTION, TIMING_OPTION, Backend, Device, Policy, Precision,
    SearchBackend, Timing, choice_value, console, errors, eval_overrides, eval_settings, out,
    start_judges_forkserver)
from kernelevo.cli.options import fail as _fail
from kernelevo.errors import KernelEvoError
from kernelevo.evaluate.shared.cores import claim_process
from kernelevo.logs import configure, get_logger, level_for
from kernelevo.run.signals import EXIT_TERMINATED, Terminated, sigterm_as_interrupt

app = App(add_completion=False, no_args_is_help=True,
                  help="Turn slow PyTorch code into fast, verified GPU kernels.")
log = get_logger("cli")

# Exit codes (cli_options): 0 the candidate passed, 1 it did not, 2 the input or setup is
# wrong; `evolve`: 0 the run finished or spent its budget, 1 it failed (llm_failed, error).
# 143 (128 + SIGTERM): stopped by SIGTERM, its children killed; a run is `interrupted`.


def _version(show: bool) -> None:
    if show:
        out.print(f"kernelevo {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="show diagnostics: judging "
                                 "phases, settings, judges and models"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="show only results and errors"),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    """Turn slow PyTorch code into fast, verified GPU kernels."""
    claim_process()  # every thread here is ours: judges move them off the timing cores
    try:
        configure(level_for(verbose, quiet))
    except KernelEvoError as exc:
        _fail(exc)
    console.quiet = quiet


@contextmanager
def _stopped_by_sigterm() -> Iterator[None]:
    """SIGTERM ends the command as Ctrl-C would (cleanup runs, children die), with exit 143."""
    with sigterm_as_interrupt():
        try:
            yield
        except Terminated as stop:
            errors.print(f"[bold red]stopped:[/] {escape(str(stop))}")
            raise typer.Exit(EXIT_TERMINATED) from None


def _progress(status: Any) -> Any:
    """A judge's progress callback: the spinner's text, and a record for --verbose."""
    def report(phase: str) -> None:
        log.debug("%s", phase)
        status.update(f"{phase}...")
    return report


LOCAL_OPTION = typer.Option(False, "--local", help="judge in this process even when an "
                            "evaluation service (kernelevo serve) is running")


def _service_or_forkserver(local: bool, device: Any) -> Any:
    """The running evaluation service to judge on; without one, the forkserver starts now.

    Started before this process imports torch, the forkserver's own imports
    (torch, dynamo, inductor) run beside this process's instead of after them:
    a cold `eval --local` on the H200 took 8.1-9.7 s instead of 10.6-11.7 s,
    in pairs in one call (bench/RESULTS.md, "Cold eval"). Its Triton mode is
    guessed from the driver's device file; a wrong guess costs a restart
    (sandbox._ensure_forkserver).
    """
    if not local:
        from kernelevo.evaluate.remote.client import find_service

        service = find_service()
        if service is not None:
            return service
    start_judges_forkserver(choice_value(device))
    return None


def _say_where_judged(service: Any) -> None:
    """Name the service that judged: `serve` is found for every command of its user."""
    if service is not None:
        out.print(f"judged on the service at {escape(service.url)} (kernelevo serve; "
                  "--local judges in this process)")


def _judge(task: Any, config: Any, progress: Any, service: Any) -> Any:
    """A judge on the running evaluation service, or (none, or --local) one in this process."""
    if service is not None:
        from kernelevo.evaluate.remote.client import ServiceJudge

        return ServiceJudge(service, task, config, progress)
    from kernelevo.evaluate.parent.judge import Judge

    return Judge(task, config, progress=progress)


@app.command("eval")
def eval_command(
    task: str = TASK_ARGUMENT,
    candidate: Path = typer.Argument(..., metavar="CANDIDATE",
                                     help="candidate file defining ModelNew"),
    backend: Optional[Backend] = typer.Option(None, help="the candidate's backend (default: "
                                              "detected)"),
    precision: Optional[Precision] = PRECISION_OPTION, device: Optional[Device] = DEVICE_OPTION,
    policy: Optional[Policy] = POLICY_OPTION,
    atol: Optional[float] = ATOL_OPTION, rtol: Optional[float] = RTOL_OPTION,
    sets: Optional[int] = SETS_OPTION, timeout: Optional[float] = TIMEOUT_OPTION,
    vary_shapes: Optional[bool] = VARY_SHAPES_OPTION,
    cuda_graph: bool = CUDA_GRAPH_OPTION,
    timing: Optional[Timing] = TIMING_OPTION,
    no_compile: bool = NO_COMPILE_OPTION,
    no_static: bool = NO_STATIC_OPTION,
    backward: bool = BACKWARD_OPTION,
    as_json: bool = typer.Option(False, "--json", help="print the full verdict as JSON"),
    local: bool = LOCAL_OPTION,
    kernelbench_dir: Optional[str] = KERNELBENCH_OPTION,
    max_input_elements: Optional[int] = MAX_INPUT_ELEMENTS_OPTION,
    config_file: Optional[str] = CONFIG_OPTION,
) -> None:
    """Judge one candidate: correctness, honesty and speed against eager and torch.compile."""
    from kernelevo.candidate import load_candidate
    from kernelevo.render import print_verdict
    from kernelevo.task import load_task

    try:
        config = eval_settings(config_file, eval_overrides(
            precision, device, policy, atol, rtol, sets, timeout, vary_shapes, cuda_graph,
            no_compile, no_static, timing, backward))
        loaded_task = at_most(load_task(task, kernelbench_dir), max_input_elements)
        loaded = load_candidate(candidate, choice_value(backend))
        # Only checked inputs start anything heavy: a forkserver left importing torch
        # held a bad call's exit (and any pipe it wrote to) for 7-9 s.
        service = _service_or_forkserver(local, device)
        with _stopped_by_sigterm(), console.status("starting") as status:
            judge = _judge(loaded_task, config, _progress(status), service)
            verdict = judge.evaluate(loaded)
    except KernelEvoError as exc:
        _fail(exc)
    if as_json:
        out.print_json(json.dumps(verdict.to_dict()))
    else:
        print_verdict(out, loaded.name, verdict, brief=console.quiet)
        if verdict.profile is not None and not console.quiet:
            print_profile(out, verdict.profile)
        _say_where_judged(service)
    # A PyTorch-only candidate is correct but is no kernel: it does not pass.
    raise typer.Exit(0 if verdict.passed_kernel else EXIT_FAILED)


@app.command("compare")
def compare_command(
    task: str = TASK_ARGUMENT,
    first: Path = typer.Argument(..., metavar="A", help="candidate A"),
    second: Path = typer.Argument(..., metavar="B", help="candidate B"),
    precision: Optional[Precision] = PRECISION_OPTION, device: Optional[Device] = DEVICE_OPTION,
    policy: Optional[Policy] = POLICY_OPTION,
    cuda_graph: bool = CUDA_GRAPH_OPTION,
    timing: Optional[Timing] = TIMING_OPTION,
    no_compile: bool = NO_COMPILE_OPTION,
    as_json: bool = typer.Option(False, "--json", help="print both verdicts and the result"),
    local: bool = LOCAL_OPTION,
    kernelbench_dir: Optional[str] = KERNELBENCH_OPTION,
    max_input_elements: Optional[int] = MAX_INPUT_ELEMENTS_OPTION,
    config_file: Optional[str] = CONFIG_OPTION,
) -> None:
    """Judge two candidates under the same protocol, timed interleaved, and say which is faster."""
    from kernelevo.candidate import load_candidate
    from kernelevo.evaluate.parent.compare import compare_candidates
    from kernelevo.render import distinct_names, print_comparison
    from kernelevo.task import load_task

    try:
        config = eval_settings(config_file, eval_overrides(
            precision, device, policy, cuda_graph=cuda_graph, no_compile=no_compile,
            measure=timing))
        loaded_task = at_most(load_task(task, kernelbench_dir), max_input_elements)
        a, b = load_candidate(first), load_candidate(second)
        service = _service_or_forkserver(local, device)  # only once the inputs are checked
        with _stopped_by_sigterm(), console.status("starting") as status:
            progress = _progress(status)
            result = compare_candidates(loaded_task, a, b, config, progress=progress,
                                        judge=_judge(loaded_task, config, progress, service))
    except KernelEvoError as exc:
        _fail(exc)
    if as_json:
        out.print_json(json.dumps(result.to_dict()))
    else:
        print_comparison(out, *distinct_names(first, second), result, brief=console.quiet)
        _say_where_judged(service)
    raise typer.Exit(0 if result.a.passed_kernel and result.b.passed_kernel else EXIT_FAILED)


@app.command("evolve")
def evolve_command(
    task: Optional[str] = typer.Argument(None, metavar="TASK", help="task file or "
                                         "kernelbench:levelN/M (omit with --resume)"),
    backend: Optional[SearchBackend] = typer.Option(None, help="the backend kernels are "
                                                    "written in (default: triton)"),
    model: list[str] = typer.Option([], "--model", metavar="MODEL", help="model name, or "
                                    "NAME=WEIGHT; repeat for several"),
    base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint"),
    api_key_env: Optional[str] = typer.Option(None, help="environment variable with the key "
                                              "(default: OPENAI_API_KEY)"),
    tokens: Optional[str] = typer.Option(None, help="token budget, e.g. 1M (default 1M)"),
    usd: Optional[str] = typer.Option(None, help="dollar budget, e.g. 2"),
    time_limit: Optional[str] = typer.Option(None, "--time", help="wall-time budget, e.g. 2h"),
    candidates: Optional[int] = typer.Option(None, help="most candidates to propose"),
    gpus: Optional[str] = typer.Option(None, help="'all' (default) or a list like 0,1"),
    cluster: Optional[str] = typer.Option(None, metavar="ADDRESS", help="judge on the workers "
                                          "of this Dask scheduler, e.g. tcp://HOST:8786 "
                                          "(docs/cluster.md)"),
    cluster_slots: Optional[int] = typer.Option(None, help="cluster jobs in flight (default: "
                                                "one per worker GPU)"),
    resume: Optional[str] = typer.Option(None, metavar="RUN", help="run id or folder to "
                                         "continue"),
    runs_dir: Path = typer.Option(Path("runs"), envvar="KERNELEVO_RUNS_DIR", metavar="DIR",
                                  help="where runs are stored"),
    seed: list[Path] = typer.Option([], "--seed", metavar="FILE", help="starting candidate "
                                    "file(s)"),
    llm_in_flight: Optional[int] = typer.Option(None, help="LLM requests in flight (default 8)"),
    islands: Optional[int] = typer.Option(None, help="archive islands (default 3)"),
    stop_at_roofline: Optional[float] = typer.Option(
        None, min=0.0, max=1.0, help="end the search once a kernel reaches this fraction of "
        "its roofline bound, e.g. 0.9 (default: never)"),
    precision: Optional[Precision] = PRECISION_OPTION, device: Optional[Device] = DEVICE_OPTION,
    policy: Optional[Policy] = POLICY_OPTION,
    no_compile: bool = NO_COMPILE_OPTION,
    timing: Optional[Timing] = TIMING_OPTION,
    backward: bool = BACKWARD_OPTION,
    as_json: bool = typer.Option(False, "--json", help="print the final summary as JSON"),
    kernelbench_dir: Optional[str] = KERNELBENCH_OPTION,
    max_input_elements: Optional[int] = MAX_INPUT_ELEMENTS_OPTION,
    config_file: Optional[str] = CONFIG_OPTION,
    no_memory: bool = typer.Option(False, "--no-memory", help="neither recall nor record "
                                   "what similar tasks taught (docs/memory.md)"),
) -> None:
    """Search for faster kernels with an LLM and the zero-token tuner, within budgets."""
    from kernelevo.run import setup
    from kernelevo.cli.evolve import run_evolve
    from kernelevo.task import load_task

    try:
        from kernelevo.config_file import resolve

        overrides = {**eval_overrides(precision, device, policy, no_compile=no_compile,
                                      measure=timing, backward=backward),
                     **setup.evolve_overrides(choice_value(backend), islands, llm_in_flight, model,
                                              base_url, api_key_env, tokens, usd, time_limit,
                                              candidates, cluster, cluster_slots,
                                              no_memory=no_memory)}
        overrides["search"]["stop_at_roofline"] = stop_at_roofline
        options = setup.evolve_options(resolve(config_file, overrides, FLAGS),
                                       runs_dir=runs_dir, resume=resume, gpus=gpus, seeds=seed)
        if task is None and resume is None:
            raise typer.BadParameter("give a TASK, or --resume RUN")
        loaded = at_most(load_task(task, kernelbench_dir), max_input_elements) if task else None
        with _stopped_by_sigterm():
            evolved = run_evolve(console, loaded, options)
    except KernelEvoError as exc:
        _fail(exc)
    result = evolved.progress
    if as_json:
        from kernelevo.run.as_json import evolve_json

        _print_json(evolve_json(evolved.run_id, evolved.run_dir, result))
    else:
        _print_summary(result)
    outcome = result.outcome
    if outcome is not None and outcome.failed:
        errors.print(f"[bold red]error:[/] the run ended with {outcome.status}: "
                     f"{escape(outcome.reason)}")
        raise typer.Exit(EXIT_FAILED)


def _print_summary(result: Any) -> None:
    untimed = result.by_status.get("ok", 0) and result.best_vs_eager is None
    out.print(f"stopped: {escape(result.message)}; best {result.best_id or '-'}"
              + (f" at {result.best_vs_eager:.2f}x vs eager" if result.best_vs_eager else "")
              + (f" ({result.by_status['ok']} correct; no timings without a GPU)"
                 if untimed else ""))
    if result.by_origin:
        out.print(f"candidates {result.origins_text()} (the candidate budget counts all "
                  "but seeds)")


_RUN_ARGUMENT = typer.Argument(..., metavar="RUN", help="run id, part of it, or its folder")
_RUNS_DIR = typer.Option(None, "--runs-dir", envvar="KERNELEVO_RUNS_DIR", metavar="DIR",
                         help="where runs are stored (default ./runs)")


@app.command("runs")
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

            _print_json(runs_json(folder))
        else:
            list_runs_table(out, folder)
    except KernelEvoError as exc:
        _fail(exc)
    note = not_runs_note(folder)
    if note:  # on stderr: the list itself stays what a script reads
        console.print(f"note: {escape(note)}")


@app.command("show")
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
                _print_json(run_json(store))
        else:
            show_run(out, runs_dir or default_runs_dir(), run)
    except KernelEvoError as exc:
        _fail(exc)


def _print_json(value: Any) -> None:
    """JSON on stdout as plain text: rich would wrap long lines and colour them."""
    sys.stdout.write(json.dumps(value, indent=2) + "\n")


@app.command("export")
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
                                             progress=_progress(status), force=force)
    except KernelEvoError as exc:
        _fail(exc)
    out.print(f"wrote {escape(str(path))}")
    if verdict is not None:
        print_verdict(out, path.name, verdict, brief=console.quiet)
        if not verdict.ok:
            raise typer.Exit(EXIT_FAILED)


@app.command("report")
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
        _fail(exc)
    out.print(f"wrote {escape(str(written))}")


@app.command("ui")
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
        _fail(exc)


@app.command("migrate")
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
        _fail(exc)


app.command("config")(config_command)
app.command("suite")(suite_command)
app.add_typer(memory_app, name="memory")
app.command("serve")(serve_command)
app.add_typer(model_app, name="model")
app.command("profile")(profile_command)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
