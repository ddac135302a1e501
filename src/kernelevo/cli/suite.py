"""`kernelevo suite`: judge the solutions of many tasks; correct fraction, fast_p, geomean."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

import typer

from kernelevo.cli.options import (CONFIG_OPTION, DEVICE_OPTION, KERNELBENCH_OPTION,
                                   NO_COMPILE_OPTION,
                                   POLICY_OPTION, PRECISION_OPTION, TIMEOUT_OPTION,
                                   TIMING_OPTION, Device,
                                   Policy, Precision, Timing, check_search_flags, console,
                                   errors, eval_overrides, eval_settings, fail, out)
from kernelevo.errors import KernelEvoError
from kernelevo.paths import check_folder


def suite_command(
    tasks: list[str] = typer.Argument(..., metavar="TASKS",
                                      help="kernelbench:level1, kernelbench:level1/1-100, "
                                      "kernelbench:level1/3,5,7-9, a folder of task files "
                                      "or a task file; several may be given"),
    solutions: Optional[Path] = typer.Option(
        None, "--solutions", metavar="DIR",
        help="folder of candidates to judge (with --evolve: seeds): "
        "level_L_problem_P_sample_S_kernel.py (KernelBench's layout) or <task stem>.py / "
        "<task stem>__*.py"),
    out_dir: Path = typer.Option(..., "--out", metavar="DIR",
                                 help="folder for results.jsonl, suite.json, "
                                 "suite.md and suite.html"),
    resume: bool = typer.Option(False, "--resume", help="continue the suite in --out"),
    max_input_elements: Optional[int] = typer.Option(
        None, min=1, help="shrink tasks whose input set holds more values than this"),
    gpus: Optional[str] = typer.Option(None, help="GPUs to use, 'all' or indexes like 0,1: "
                                       "tasks are judged side by side, one per GPU (with "
                                       "--evolve: each search's judges); default: one GPU"),
    lanes: Optional[int] = typer.Option(None, min=1, help="tasks judged at once per GPU; "
                                        "their timing phases take turns (default: by cores)"),
    build_workers: Optional[int] = typer.Option(
        None, min=1, help="CUDA builds at once, ahead of judging (default: by cores and "
        "memory)"),
    head_start: Optional[float] = typer.Option(
        None, min=0.0, metavar="SECONDS", help="how long a GPU's other lanes wait for the "
        "suite's first row before they start (default 6; 0: all lanes at once)"),
    fresh_baselines: bool = typer.Option(False, "--fresh-baselines", help="time the baselines "
                                         "again instead of reusing those stored for this "
                                         "GPU model"),
    precision: Optional[Precision] = PRECISION_OPTION, device: Optional[Device] = DEVICE_OPTION,
    policy: Optional[Policy] = POLICY_OPTION,
    timeout: Optional[float] = TIMEOUT_OPTION,
    timing: Optional[Timing] = TIMING_OPTION,
    no_compile: bool = NO_COMPILE_OPTION,
    as_json: bool = typer.Option(False, "--json", help="print suite.json to stdout"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="also print where the "
                                 "suite's time went (the first row, the verdicts' phases, "
                                 "the lanes' waits), as suite.json's time_spent has it"),
    evolve: bool = typer.Option(False, "--evolve", help="search each task with evolve instead "
                                "of judging given solutions; its best kernel is the task's"),
    model: Optional[list[str]] = typer.Option(None, "--model", metavar="MODEL",
                                              help="with --evolve: model "
                                              "(repeatable, M=WEIGHT); none: the tuner alone"),
    base_url: Optional[str] = typer.Option(None, help="with --evolve: OpenAI-compatible "
                                           "endpoint"),
    tokens: Optional[str] = typer.Option(None, help="with --evolve: token budget per task"),
    usd: Optional[str] = typer.Option(None, help="with --evolve: dollar budget per task"),
    time_limit: Optional[str] = typer.Option(None, "--time", help="with --evolve: wall-clock "
                                             "budget per task (e.g. 20m)"),
    candidates: Optional[int] = typer.Option(None, min=1, help="with --evolve: candidates "
                                             "per task"),
    no_memory: bool = typer.Option(False, "--no-memory", help="with --evolve: neither recall "
                                   "nor record what similar tasks taught"),
    kernelbench_dir: Optional[str] = KERNELBENCH_OPTION,
    config_file: Optional[str] = CONFIG_OPTION,
) -> None:
    """Judge solutions of many tasks (or --evolve each): correct fraction, fast_p, geomean."""
    from kernelevo.run.signals import (EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated,
                                       sigterm_as_interrupt)
    from kernelevo.suite import SuitePlan, SuiteStopped, run_suite
    from kernelevo.suite.evolve import SearchBudget
    from kernelevo.suite.render import as_json as suite_json
    from kernelevo.suite.render import summary_table, task_table
    from kernelevo.suite.time_spent import time_lines

    try:
        _check_out(out_dir)
        config = eval_settings(config_file, eval_overrides(
            precision, device, policy, timeout=timeout, no_compile=no_compile, measure=timing))
        searching = {"--model": model, "--base-url": base_url, "--tokens": tokens,
                     "--usd": usd, "--time": time_limit, "--candidates": candidates,
                     "--no-memory": no_memory or None}
        if evolve:
            check_search_flags(model, base_url, tokens, usd, time_limit, candidates)
        else:
            _refuse_without_evolve(searching)
        search = SearchBudget(tuple(model or ()), base_url, tokens, usd, time_limit,
                              candidates, memory=not no_memory) if evolve else None
        plan = SuitePlan(tuple(tasks), solutions, out_dir, config, kernelbench_dir,
                         max_input_elements, resume, not fresh_baselines, search,
                         _gpu_indexes(gpus), lanes, build_workers,
                         **({} if head_start is None else {"head_start_s": head_start}))
        with sigterm_as_interrupt():
            result = run_suite(plan, progress=lambda line: console.print(
                line, markup=False, highlight=False))
    except KernelEvoError as exc:
        fail(exc)
    except SuiteStopped as stopped:
        # What was judged stays, with its summary files and where its time went.
        if stopped.result.time_spent is not None and (verbose or _verbose_logging()):
            for line in time_lines(stopped.result.time_spent):
                console.print(line, markup=False, highlight=False, soft_wrap=True)
        judged = stopped.result.time_spent["rows"] if stopped.result.time_spent else 0
        errors.print(f"stopped: {judged} row(s) judged in this run; {plan.out}/suite.json, "
                     f"suite.md and suite.html hold every row so far; --resume judges the "
                     "rest", markup=False, highlight=False)
        raise typer.Exit(EXIT_TERMINATED if isinstance(stopped.stop, Terminated)
                         else EXIT_INTERRUPTED) from None
    if result.time_spent is not None and (verbose or _verbose_logging()):
        for line in time_lines(result.time_spent):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if as_json:
        out.print_json(json.dumps(suite_json(result)))
        return
    out.print(task_table(result), markup=False, highlight=False, soft_wrap=True)
    out.print("")
    out.print(summary_table(result), markup=False, highlight=False, soft_wrap=True)
    console.print(f"written: {plan.out}/suite.json, suite.md and suite.html", markup=False,
                  highlight=False)


def _verbose_logging() -> bool:
    """Whether `kernelevo --verbose suite ...` asked for diagnostics."""
    import logging

    from kernelevo.logs import ROOT_LOGGER

    return logging.getLogger(ROOT_LOGGER).isEnabledFor(logging.DEBUG)


def _refuse_without_evolve(flags: Mapping[str, object]) -> None:
    """The search's flags mean nothing when solutions are judged: say so, never ignore them."""
    given = [flag for flag, value in flags.items() if value]
    if given:
        one = len(given) == 1
        raise KernelEvoError(f"{', '.join(given)} only appl{'ies' if one else 'y'} with "
                             "--evolve (a search per task): add --evolve, or leave "
                             f"{'it' if one else 'them'} out to judge --solutions")


def _check_out(out_dir: Path) -> None:
    """--out must be a folder, or a path where one can be made."""
    check_folder(out_dir, "--out", "give --out a folder for the suite's results (made if "
                 "missing)", missing_ok=True)


def _gpu_indexes(gpus: str | None) -> tuple[int, ...]:
    """--gpus as indexes of visible GPUs (checked); () when not given."""
    if gpus is None:
        return ()
    import torch

    from kernelevo.run.setup import select_gpus

    return tuple(select_gpus(gpus, torch.cuda.device_count()))
