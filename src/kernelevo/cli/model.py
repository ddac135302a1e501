"""`kernelevo model profile|extract|apply|optimize`: a whole model in, a faster model out."""

from __future__ import annotations

import copy
import json
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from kernelevo.cli.options import (EXIT_FAILED, check_search_flags, choice_value, console,
                                   fail, out)
from kernelevo.errors import KernelEvoError

model_app = typer.Typer(no_args_is_help=True, add_completion=False,
                        help="Profile a model, extract its hot submodules as tasks, put "
                             "kernels back as custom ops and verify (docs/model.md).")


class ModelDevice(str, Enum):
    """Where a model runs (typer lists the choices and refuses others with exit 2)."""

    cpu = "cpu"
    cuda = "cuda"


_MODEL = typer.Argument(..., help="a .py file defining build() -> (nn.Module, inputs), or "
                        "a KernelBench file (Model, get_inputs, get_init_inputs)")
_SEED = typer.Option(42, help="seed set before build(): the weights tasks are made with")
_DEVICE = typer.Option(None, help="where the model runs (default: cuda when there is a GPU)")
_PRECISION = typer.Option("fp32", help="fp32, fp16 or bf16: the model's dtype")
_JSON = typer.Option(False, "--json", help="print JSON on stdout")
_BACKWARD = typer.Option(False, "--backward", help="training tasks: gradients judged too, and "
                         "apply puts the kernel's own backward in the model")


@model_app.command("profile")
def profile_command(model: Path = _MODEL, seed: int = _SEED,
                    device: Optional[ModelDevice] = _DEVICE, precision: str = _PRECISION,
                    repeats: int = typer.Option(3, min=1, help="forwards profiled"),
                    limit: int = typer.Option(20, min=1, help="rows shown"),
                    as_json: bool = _JSON) -> None:
    """Rank the model's submodules by time (GPU time with a GPU, else CPU time)."""
    from kernelevo.model.profile import profile_model, profile_table

    try:
        profile = profile_model(str(model), seed=seed, device=choice_value(device),
                                precision=precision, repeats=repeats)
    except KernelEvoError as exc:
        fail(exc)
    if as_json:
        out.print_json(json.dumps(profile.to_dict()))
        return
    clock = "GPU (CUDA activities)" if profile.activity == "cuda" else "CPU (no GPU)"
    out.print(f"{escape(str(model))}: forward {profile.total_ms:.3f} ms of {clock} time, "
              f"{profile.precision}, mean of {profile.repeats}")
    out.print(_table(profile_table(profile, limit)))


@model_app.command("extract")
def extract_command(model: Path = _MODEL,
                    output: Path = typer.Option(..., "-o", "--out", help="folder for the tasks"),
                    top: int = typer.Option(3, min=1, help="hot spots to extract"),
                    leaves: bool = typer.Option(False, help="only submodules without children"),
                    paths: Optional[str] = typer.Option(None, help="exact submodule paths, "
                                                        "comma-separated, instead of --top"),
                    fixed_shapes: bool = typer.Option(False, help="write every size as a "
                                                      "literal (the judge varies none)"),
                    backward: bool = _BACKWARD,
                    seed: int = _SEED, device: Optional[ModelDevice] = _DEVICE,
                    precision: str = _PRECISION, as_json: bool = _JSON) -> None:
    """Write the hottest submodules as KernelBench tasks that `eval`, `evolve` and `suite` take."""
    from kernelevo.model.extract import check_out_folder, extract, select_hot
    from kernelevo.model.profile import profile_model

    try:
        check_out_folder(output)  # before the profile, which takes a while
        profile = profile_model(str(model), seed=seed, device=choice_value(device),
                                precision=precision)
        spots = select_hot(profile, top, paths=paths.split(",") if paths else None,
                           leaves=leaves)
        extract(profile, spots, output, fixed_shapes=fixed_shapes, backward=backward)
    except KernelEvoError as exc:
        fail(exc)
    if as_json:
        out.print_json(json.dumps({"out": str(output), "backward": backward, "tasks": [
            {"name": s.name, "paths": list(s.paths), "time_ms": s.time_ms} for s in spots]}))
        return
    for spot in spots:
        out.print(f"{escape(str(output / (spot.name + '.py')))}  {', '.join(spot.paths)}  "
                  f"{spot.time_ms:.3f} ms ({profile.activity})")


@model_app.command("apply")
def apply_command(model: Path = _MODEL,
                  kernels: Path = typer.Option(..., help="folder of kernel files, "
                                               "<task>.py or <task>__<any>.py"),
                  tasks: Optional[Path] = typer.Option(None, help="the folder extract wrote "
                                                       "(default: --kernels)"),
                  guard: bool = typer.Option(True, help="run kernels only at checked shapes"),
                  timed: bool = typer.Option(True, help="time eager and torch.compile"),
                  compile_backend: Optional[str] = typer.Option(
                      None, help="torch.compile backend (default: inductor on a GPU, "
                      "aot_eager on CPU)"),
                  report: Optional[Path] = typer.Option(None, "-o", "--report",
                                                        help="folder for model_report.*"),
                  seed: int = _SEED, device: Optional[ModelDevice] = _DEVICE,
                  precision: str = _PRECISION, as_json: bool = _JSON) -> None:
    """Swap submodules for kernels (custom ops) and verify the model end to end."""
    _interpret_without_gpu(choice_value(device))
    from kernelevo.model.apply import apply
    from kernelevo.model.contract import build_model, device_for, dtype_of, model_file, moved
    from kernelevo.model.report import report_data, report_markdown, write_report
    from kernelevo.model.verify import verify

    try:
        where = device_for(choice_value(device))
        built = moved(build_model(model_file(model, seed)), where, dtype_of(precision))
        original = copy.deepcopy(built.module)
        applied = apply(built.module, kernels, tasks=tasks, guard=guard)
        # A kernel put back with its own backward is checked (and timed) training too.
        training = any(swap.training for swap in applied.swapped)
        verification = verify(original, built.module, built.inputs, device=where,
                              compile_backend=compile_backend, timed=timed, training=training)
    except KernelEvoError as exc:
        fail(exc)
    data = report_data(None, applied.to_dict(), verification.to_dict())
    if report:
        paths = write_report(report, data)
        console.print(f"report: {escape(str(paths[1]))}")
    if as_json:
        out.print_json(json.dumps(data, default=str))
    else:
        out.print(escape(report_markdown(data)))
    if not verification.correct:
        raise typer.Exit(EXIT_FAILED)


@model_app.command("optimize")
def optimize_command(model: Path = _MODEL,
                     output: Path = typer.Option(..., "-o", "--out",
                                                 help="folder for everything; run again "
                                                 "with the same folder to resume"),
                     top: int = typer.Option(3, min=1, help="hot spots to search"),
                     leaves: bool = typer.Option(False, help="only submodules without children"),
                     paths: Optional[str] = typer.Option(None, help="exact submodule paths, "
                                                         "comma-separated, instead of --top"),
                     seeds: Optional[Path] = typer.Option(None, help="folder of kernels to "
                                                          "start from (<task>.py)"),
                     llm: list[str] = typer.Option([], "--model", help="LLM name (repeat for "
                                                   "several); none: the tuner alone"),
                     base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible URL"),
                     tokens: Optional[str] = typer.Option(None, help="token budget, shared"),
                     usd: Optional[str] = typer.Option(None, help="dollar budget, shared"),
                     time: Optional[str] = typer.Option(None, help="time budget, shared"),
                     candidates: Optional[int] = typer.Option(None, help="candidates, shared"),
                     compile_backend: Optional[str] = typer.Option(None, help="torch.compile "
                                                                   "backend for the check"),
                     backward: bool = _BACKWARD,
                     seed: int = _SEED, device: Optional[ModelDevice] = _DEVICE,
                     precision: str = _PRECISION, as_json: bool = _JSON) -> None:
    """Profile, extract, evolve each task with a share of the budget, apply, verify."""
    _interpret_without_gpu(choice_value(device))
    from kernelevo.model.optimize import OptimizeOptions, optimize
    from kernelevo.model.report import report_markdown

    options = OptimizeOptions(str(model), str(output), top=top, leaves=leaves,
                              paths=tuple(paths.split(",")) if paths else (),
                              seeds_dir=str(seeds) if seeds else None, models=tuple(llm),
                              base_url=base_url, tokens=tokens, usd=usd, time=time,
                              candidates=candidates, precision=precision,
                              device=choice_value(device), seed=seed,
                              compile_backend=compile_backend, backward=backward)
    try:
        # The budget's flags as evolve checks them: a bad one fails before the profile.
        check_search_flags(llm, base_url, tokens, usd, time, candidates)
        if not llm:
            kind = " with a backward of their own" if backward else ""
            console.print(f"no --model: the tuner searches alone, from the --seeds kernels{kind}; "
                          "--top takes the hottest submodules that have one")
        data = optimize(options, say=lambda text: console.print(escape(text)))
    except KernelEvoError as exc:
        fail(exc)
    if as_json:
        out.print_json(json.dumps(data, default=str))
    else:
        out.print(escape(report_markdown(data)))
    if not data["verification"]["correct"]:
        raise typer.Exit(EXIT_FAILED)


def _interpret_without_gpu(device: Optional[str]) -> None:
    """Triton kernels on a CPU run under the interpreter, which must be set before triton loads."""
    import os

    import torch

    if device == "cpu" or not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def _table(rows: list[list[str]]) -> Any:
    table = Table(show_edge=False)
    for head in rows[0]:
        table.add_column(head)
    for row in rows[1:]:
        table.add_row(*(escape(cell) for cell in row))
    return table
