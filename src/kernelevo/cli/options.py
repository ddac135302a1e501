"""What the commands share: choices, options, the flags behind each setting, and failing."""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import Enum
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand

from kernelevo.candidate import BACKENDS, KERNEL_BACKENDS
from kernelevo.config import EvalConfig, TimingConfig
from kernelevo.schema import choices

errors = Console(stderr=True)  # errors, shown even with --quiet
console = Console(stderr=True)  # progress and diagnostics; --quiet silences it
out = Console()  # results

# Exit codes: 0 the candidate passed, 1 it did not, 2 the input or setup is wrong.
# `evolve`: 0 the run finished or spent its budget, 1 it failed (llm_failed, error).
EXIT_FAILED, EXIT_BAD_INPUT = 1, 2

# The flag behind each setting it overrides, by (table, key) of the config file.
FLAGS = {
    ("eval", "precision"): "--precision", ("eval", "device"): "--device",
    ("eval", "policy"): "--policy", ("eval", "atol"): "--atol", ("eval", "rtol"): "--rtol",
    ("eval", "input_sets"): "--sets", ("eval", "timeout_s"): "--timeout",
    ("eval", "vary_shapes"): "--vary-shapes", ("eval", "static_checks"): "--no-static",
    ("eval", "backward"): "--backward",
    ("eval.timing", "cuda_graph"): "--cuda-graph", ("eval.timing", "baselines"): "--no-compile",
    ("eval.timing", "measure"): "--timing",
    ("search", "backend"): "--backend", ("search", "islands"): "--islands",
    ("search", "llm_in_flight"): "--llm-in-flight", ("llm", "in_flight"): "--llm-in-flight",
    ("search", "cluster"): "--cluster", ("search", "cluster_slots"): "--cluster-slots",
    ("llm", "models"): "--model", ("llm", "base_url"): "--base-url",
    ("llm", "api_key_env"): "--api-key-env", ("budget", "tokens"): "--tokens",
    ("budget", "usd"): "--usd", ("budget", "time"): "--time",
    ("budget", "candidates"): "--candidates",
    ("memory", "enabled"): "--no-memory",
}


class PlainUsageCommand(TyperCommand):
    """A command whose usage line names its arguments as `TASK CANDIDATE`, not `{task}`."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [re.sub(r"^\{(.*)\}", r"\1", piece) for piece in super().collect_usage_pieces(ctx)]


class App(typer.Typer):
    """The command line's Typer: plain help (no markup to eat `[eval]`), plain usage lines."""

    def __init__(self, **kwargs: Any) -> None:
        # Plain click help: rich markup would read `[eval]` in a help text as a tag
        # and drop it, and its four-column panels leave ~17 columns for help at 80.
        super().__init__(rich_markup_mode=None, **kwargs)

    def command(self, name: str | None = None, *, cls: Any = None, **kwargs: Any) -> Any:
        return super().command(name, cls=cls or PlainUsageCommand, **kwargs)


# Choices as Enums, so typer lists them in --help and rejects others with exit 2,
# read from the settings' own declarations (`measure`'s OneOf in TimingConfig and
# the like, the backends from candidate.BACKEND_REGISTRY): a new measure or backend
# is a choice as soon as it is a setting.
def _choices(name: str, values: Iterable[str]) -> Any:
    return Enum(name, {value: value for value in values}, type=str, module=__name__)


Precision = _choices("Precision", choices(EvalConfig, "precision"))
Policy = _choices("Policy", choices(EvalConfig, "policy"))
Device = _choices("Device", choices(EvalConfig, "device"))
Backend = _choices("Backend", BACKENDS)
SearchBackend = _choices("SearchBackend", KERNEL_BACKENDS)
Timing = _choices("Timing", choices(TimingConfig, "measure"))


def choice_value(choice: Any) -> Any:
    """The plain string of an Enum choice (None stays None)."""
    return choice.value if isinstance(choice, Enum) else choice


def start_judges_forkserver(device: str | None) -> None:
    """Start the judges' forkserver now, before this process imports torch.

    Its own imports (torch, dynamo, inductor) then run beside this process's
    instead of after them (bench/RESULTS.md, "Cold eval").
    """
    from kernelevo.evaluate.sandbox.jobs import start_forkserver_for

    start_forkserver_for(device)


def fail(exc: Exception) -> NoReturn:
    # Escaped: messages name config tables like [eval] or [llm.prices], which rich
    # would otherwise take for markup and drop.
    errors.print(f"[bold red]error:[/] {escape(str(exc))}")
    raise typer.Exit(EXIT_BAD_INPUT)


def eval_overrides(precision: Any = None, device: Any = None, policy: Any = None,
                   atol: float | None = None, rtol: float | None = None,
                   sets: int | None = None, timeout: float | None = None,
                   vary_shapes: bool | None = None, cuda_graph: bool = False,
                   no_compile: bool = False, no_static: bool = False,
                   measure: Any = None, backward: bool = False) -> dict[str, dict[str, Any]]:
    """The evaluation flags as overrides by table; flags left out are None (the file decides)."""
    from kernelevo.config_file import eval_tables

    return eval_tables({
        "precision": choice_value(precision), "device": choice_value(device),
        "policy": choice_value(policy), "atol": atol, "rtol": rtol, "input_sets": sets,
        "timeout_s": timeout, "vary_shapes": vary_shapes,
        "static_checks": False if no_static else None, "backward": True if backward else None,
        "cuda_graph": cuda_graph or None, "measure": choice_value(measure),
        "baselines": ("eager",) if no_compile else None})


PRECISION_OPTION = typer.Option(None, help="floating-point precision (default: fp32)")
DEVICE_OPTION = typer.Option(None, help="where to judge (default: auto)")
POLICY_OPTION = typer.Option(None, help="honesty policy (default: default)")
KERNELBENCH_OPTION = typer.Option(None, "--kernelbench-dir", envvar="KERNELBENCH_DIR",
                                  metavar="DIR", help="KernelBench checkout for "
                                  "kernelbench:levelN/M tasks")
CONFIG_OPTION = typer.Option(None, "--config", metavar="FILE",
                             help="TOML file of settings: [eval], "
                             "[eval.timing], [search], [llm], [budget]; given flags override it")
NO_COMPILE_OPTION = typer.Option(False, "--no-compile", help="skip the torch.compile "
                                 "baseline")
CUDA_GRAPH_OPTION = typer.Option(False, "--cuda-graph", help="time with CUDA graphs "
                                 "(launch-bound kernels)")
# The tolerance and process settings `eval` and `config` both take (`suite`: the limit).
ATOL_OPTION = typer.Option(None, help="absolute tolerance override")
RTOL_OPTION = typer.Option(None, help="relative tolerance override")
SETS_OPTION = typer.Option(None, help="input sets per evaluation (default 3)")
TIMEOUT_OPTION = typer.Option(None, help="wall-clock limit per process, seconds")
VARY_SHAPES_OPTION = typer.Option(None, "--vary-shapes/--no-vary-shapes",
                                  help="also check at other sizes of the task (default: on)")
BACKWARD_OPTION = typer.Option(False, "--backward", help="judge the backward too: "
                               "gradients of every floating input and parameter (a task can "
                               "ask with `backward = True`)")
NO_STATIC_OPTION = typer.Option(False, "--no-static", help="skip the static checks "
                                "(runtime checks only)")
TASK_ARGUMENT = typer.Argument(..., metavar="TASK", help="task file or kernelbench:levelN/M")
MAX_INPUT_ELEMENTS_OPTION = typer.Option(
    None, "--max-input-elements", min=1, metavar="N",
    help="judge the task at smaller sizes: its largest size constants halved until one "
    "input set holds at most N values (KernelBench level 1's inputs hold up to 1.6 G, and "
    "a backward keeps several copies)")
TIMING_OPTION = typer.Option(None, "--timing", help="the measure speedups use: call (host "
                             "time per call in a loop of calls, what a user calling the model "
                             "waits; default), gpu (device time per call, launch gaps hidden) "
                             "or kernelbench (KernelBench's harness protocol)")


def at_most(task: Any, max_elements: int | None) -> Any:
    """`task` shrunk to `max_elements` values an input set (suite/shrink.py), saying which
    sizes changed; `task` itself without a limit or when it already fits."""
    if not max_elements:
        return task
    from kernelevo.suite.shrink import input_elements, shrink_to

    smaller, changed = shrink_to(task, max_elements)
    if changed:
        console.print("judged at smaller sizes (--max-input-elements): " + ", ".join(
            f"{name} {task.size_constants[name]} -> {value}" for name, value in changed.items()),
            soft_wrap=True)  # one line each, whatever the terminal's width
    held = input_elements(smaller)
    if held > max_elements:
        console.print(f"its input set still holds {held:,} values (--max-input-elements "
                      f"{max_elements:,}): no size constant is left to halve", soft_wrap=True)
    return smaller


def check_search_flags(models: Any = (), base_url: str | None = None,
                       tokens: str | None = None, usd: str | None = None,
                       time_limit: str | None = None, candidates: int | None = None) -> None:
    """The search's flags checked as `evolve` checks them, for commands that search later
    (suite --evolve, model optimize): a bad --tokens fails now, not in every task's run."""
    from kernelevo.config_file import resolve
    from kernelevo.run.setup import evolve_overrides

    resolve(None, evolve_overrides(models=list(models or ()), base_url=base_url, tokens=tokens,
                                   usd=usd, time_limit=time_limit, candidates=candidates),
            FLAGS)


def eval_settings(config_file: str | None, overrides: dict[str, dict[str, Any]]) -> Any:
    """The EvalConfig of defaults, then the config file, then the flags given."""
    from kernelevo.config_file import eval_config, resolve
    from kernelevo.logs import get_logger

    config = eval_config(resolve(config_file, overrides, FLAGS))
    get_logger("cli").debug("settings: %s", config)
    return config


def judge_progress(status: Any) -> Any:
    """A judge's progress callback: the spinner's text, and a record for --verbose."""
    from kernelevo.logs import get_logger

    log = get_logger("cli")

    def report(phase: str) -> None:
        log.debug("%s", phase)
        status.update(f"{phase}...")
    return report


def print_json(value: Any) -> None:
    """JSON on stdout as plain text: rich would wrap long lines and colour them."""
    import json
    import sys

    sys.stdout.write(json.dumps(value, indent=2) + "\n")
