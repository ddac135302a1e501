"""The command line: eval | compare | evolve here, and every command registered on `app`
(runs | show | export | report | ui | migrate: cli/runs.py; config | suite | memory | serve
| model | profile: their modules)."""

from __future__ import annotations

import json
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
from kernelevo.cli.runs import (export_command, migrate_command, report_command,
                                runs_command, show_command, ui_command)
from kernelevo.cli.model import model_app
from kernelevo.cli.serve import serve_command
from kernelevo.cli.suite import suite_command
from kernelevo.cli.options import (  # noqa: F401 (the choices, re-exported)
    ATOL_OPTION, BACKWARD_OPTION, CONFIG_OPTION, CUDA_GRAPH_OPTION, DEVICE_OPTION,
    EXIT_BAD_INPUT, EXIT_FAILED, FLAGS, KERNELBENCH_OPTION, MAX_INPUT_ELEMENTS_OPTION,
    NO_COMPILE_OPTION, NO_STATIC_OPTION, at_most,
    RTOL_OPTION, SETS_OPTION, TASK_ARGUMENT, TIMEOUT_OPTION, VARY_SHAPES_OPTION, App,
    POLICY_OPTION, PRECISION_OPTION, TIMING_OPTION, Backend, Device, Policy, Precision,
    SearchBackend, Timing, choice_value, console, errors, eval_overrides, eval_settings,
    judge_progress, out, print_json, start_judges_forkserver)
from kernelevo.cli.options import fail as _fail
from kernelevo.errors import KernelEvoError
from kernelevo.evaluate.shared.cores import claim_process
from kernelevo.logs import configure, level_for
from kernelevo.run.signals import EXIT_TERMINATED, Terminated, sigterm_as_interrupt

app = App(add_completion=False, no_args_is_help=True,
                  help="Turn slow PyTorch code into fast, verified GPU kernels.")

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
            judge = _judge(loaded_task, config, judge_progress(status), service)
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
            progress = judge_progress(status)
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

        print_json(evolve_json(evolved.run_id, evolved.run_dir, result))
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


for name, command in (("runs", runs_command), ("show", show_command),
                      ("export", export_command), ("report", report_command),
                      ("ui", ui_command), ("migrate", migrate_command)):
    app.command(name)(command)
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
