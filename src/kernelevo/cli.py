"""The command line: kernelevo eval | compare | evolve | runs | show | export | report | ui."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from kernelevo.errors import KernelEvoError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Turn slow PyTorch code into fast, verified GPU kernels.")
console = Console(stderr=True)
out = Console()

# Exit codes: 0 the candidate passed, 1 it did not, 2 the input or setup is wrong.
EXIT_FAILED, EXIT_BAD_INPUT = 1, 2


def _fail(exc: Exception) -> None:
    console.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(EXIT_BAD_INPUT)


def _config(config_file, precision, device, policy, atol, rtol, sets, timeout, vary_shapes,
            cuda_graph, no_compile, no_static):
    from kernelevo.config import load_eval_config

    return load_eval_config(
        config_file, precision=precision, device=device, policy=policy, atol=atol, rtol=rtol,
        input_sets=sets, timeout_s=timeout, vary_shapes=vary_shapes or None,
        cuda_graph=cuda_graph or None, static_checks=False if no_static else None,
        baselines=("eager",) if no_compile else None)


_PRECISION = typer.Option(None, help="fp32, fp16 or bf16 (default fp32)")
_DEVICE = typer.Option(None, help="auto, cuda or cpu (default auto)")
_POLICY = typer.Option(None, help="strict, default or permissive honesty policy")
_KB = typer.Option(None, "--kernelbench-dir", envvar="KERNELBENCH_DIR",
                   help="KernelBench checkout for kernelbench:levelN/M tasks")
_CONFIG = typer.Option(None, "--config", help="TOML file with an [eval] table")


@app.command("eval")
def eval_command(
    task: str = typer.Argument(..., help="task file or kernelbench:levelN/M"),
    candidate: Path = typer.Argument(..., help="candidate file defining ModelNew"),
    backend: Optional[str] = typer.Option(None, help="triton or cuda (default: detected)"),
    precision: Optional[str] = _PRECISION, device: Optional[str] = _DEVICE,
    policy: Optional[str] = _POLICY,
    atol: Optional[float] = typer.Option(None, help="absolute tolerance override"),
    rtol: Optional[float] = typer.Option(None, help="relative tolerance override"),
    sets: Optional[int] = typer.Option(None, help="input sets per evaluation (default 3)"),
    timeout: Optional[float] = typer.Option(None, help="wall-clock limit per process, seconds"),
    vary_shapes: bool = typer.Option(False, help="re-check at perturbed sizes"),
    cuda_graph: bool = typer.Option(False, help="time with CUDA graphs (launch-bound kernels)"),
    no_compile: bool = typer.Option(False, help="skip the torch.compile baseline"),
    no_static: bool = typer.Option(False, help="skip the static checks (runtime checks only)"),
    as_json: bool = typer.Option(False, "--json", help="print the full verdict as JSON"),
    kernelbench_dir: Optional[str] = _KB, config_file: Optional[str] = _CONFIG,
) -> None:
    """Judge one candidate: correctness, honesty and speed against eager and torch.compile."""
    from kernelevo.candidate import load_candidate
    from kernelevo.evaluate.judge import Judge
    from kernelevo.render import print_verdict
    from kernelevo.task import load_task

    try:
        config = _config(config_file, precision, device, policy, atol, rtol, sets, timeout,
                         vary_shapes, cuda_graph, no_compile, no_static)
        loaded_task = load_task(task, kernelbench_dir)
        loaded = load_candidate(candidate, backend)
        with console.status("starting") as status:
            judge = Judge(loaded_task, config, progress=lambda p: status.update(f"{p}..."))
            verdict = judge.evaluate(loaded)
    except KernelEvoError as exc:
        _fail(exc)
    if as_json:
        out.print_json(json.dumps(verdict.to_dict()))
    else:
        print_verdict(out, loaded.name, verdict)
    raise typer.Exit(0 if verdict.ok else EXIT_FAILED)


@app.command("compare")
def compare_command(
    task: str = typer.Argument(..., help="task file or kernelbench:levelN/M"),
    first: Path = typer.Argument(..., help="candidate A"),
    second: Path = typer.Argument(..., help="candidate B"),
    precision: Optional[str] = _PRECISION, device: Optional[str] = _DEVICE,
    policy: Optional[str] = _POLICY,
    cuda_graph: bool = typer.Option(False, help="time with CUDA graphs"),
    no_compile: bool = typer.Option(False, help="skip the torch.compile baseline"),
    as_json: bool = typer.Option(False, "--json", help="print both verdicts and the result"),
    kernelbench_dir: Optional[str] = _KB, config_file: Optional[str] = _CONFIG,
) -> None:
    """Judge two candidates under the same protocol, timed interleaved, and say which is faster."""
    from kernelevo.candidate import load_candidate
    from kernelevo.evaluate.compare import compare_candidates
    from kernelevo.render import print_comparison
    from kernelevo.task import load_task

    try:
        config = _config(config_file, precision, device, policy, None, None, None, None, False,
                         cuda_graph, no_compile, False)
        loaded_task = load_task(task, kernelbench_dir)
        a, b = load_candidate(first), load_candidate(second)
        with console.status("starting") as status:
            result = compare_candidates(loaded_task, a, b, config,
                                        progress=lambda p: status.update(f"{p}..."))
    except KernelEvoError as exc:
        _fail(exc)
    if as_json:
        out.print_json(json.dumps(result.to_dict()))
    else:
        print_comparison(out, a.name, b.name, result)
    raise typer.Exit(0 if result.a.ok and result.b.ok else EXIT_FAILED)


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
