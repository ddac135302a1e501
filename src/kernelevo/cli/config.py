"""`kernelevo config`: the effective settings, as TOML or JSON, with where each one came from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.console import Console

from kernelevo.cli.options import (
    ATOL_OPTION, CONFIG_OPTION, CUDA_GRAPH_OPTION, DEVICE_OPTION, FLAGS, NO_COMPILE_OPTION,
    NO_STATIC_OPTION, POLICY_OPTION, PRECISION_OPTION, RTOL_OPTION, SETS_OPTION, TIMEOUT_OPTION,
    TIMING_OPTION, VARY_SHAPES_OPTION,
    Device, Policy, Precision, SearchBackend, Timing, choice_value, eval_overrides, fail)
from kernelevo.errors import KernelEvoError

if TYPE_CHECKING:
    from kernelevo.config_file import Effective

out = Console()


def config_command(
    config_file: Optional[str] = CONFIG_OPTION,
    as_json: bool = typer.Option(False, "--json", help="print JSON: {config, sources}"),
    precision: Optional[Precision] = PRECISION_OPTION, device: Optional[Device] = DEVICE_OPTION,
    policy: Optional[Policy] = POLICY_OPTION,
    atol: Optional[float] = ATOL_OPTION, rtol: Optional[float] = RTOL_OPTION,
    sets: Optional[int] = SETS_OPTION, timeout: Optional[float] = TIMEOUT_OPTION,
    vary_shapes: Optional[bool] = VARY_SHAPES_OPTION,
    cuda_graph: bool = CUDA_GRAPH_OPTION,
    timing: Optional[Timing] = TIMING_OPTION,
    no_compile: bool = NO_COMPILE_OPTION,
    no_static: bool = NO_STATIC_OPTION,
    backend: Optional[SearchBackend] = typer.Option(None, help="the search's backend"),
    islands: Optional[int] = typer.Option(None, help="archive islands"),
    llm_in_flight: Optional[int] = typer.Option(None, help="LLM requests in flight"),
    model: list[str] = typer.Option([], "--model", metavar="MODEL",
                                    help="model name, or NAME=WEIGHT"),
    base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint"),
    api_key_env: Optional[str] = typer.Option(None, help="environment variable with the key"),
    tokens: Optional[str] = typer.Option(None, help="token budget, e.g. 1M"),
    usd: Optional[str] = typer.Option(None, help="dollar budget, e.g. 2"),
    time_limit: Optional[str] = typer.Option(None, "--time", help="wall-time budget, e.g. 2h"),
    candidates: Optional[int] = typer.Option(None, help="most candidates to propose"),
) -> None:
    """Print the effective settings (defaults, then --config FILE, then flags) as TOML."""
    from kernelevo.config_file import nested, resolve
    from kernelevo.run.setup import evolve_overrides

    try:
        overrides = {**eval_overrides(precision, device, policy, atol, rtol, sets, timeout,
                                      vary_shapes, cuda_graph, no_compile, no_static, timing),
                     **evolve_overrides(choice_value(backend), islands, llm_in_flight, model,
                                        base_url, api_key_env, tokens, usd, time_limit,
                                        candidates)}
        # makes every settings object: a run's checks, those spanning keys too, fail here
        effective = resolve(config_file, overrides, FLAGS)
    except KernelEvoError as exc:
        fail(exc)
    if as_json:
        out.print_json(json.dumps({"config": nested(effective.values),
                                   "sources": nested(effective.sources)}))
    else:
        # Plain text: a TOML string such as "[eval]" must reach the terminal as written.
        out.print(to_toml(effective, config_file), markup=False, highlight=False,
                  soft_wrap=True)


def to_toml(effective: Effective, config_file: str | Path | None = None) -> str:
    """The effective settings as a config file, each line's source in a comment."""
    read = f"then {config_file}, " if config_file else ""
    lines = [f"# kernelevo's settings: defaults, {read}then the flags given."]
    for name, values in effective.values.items():
        lines += ["", f"[{name}]"]
        for key, value in values.items():
            source = effective.sources[name][key]
            if value is None:
                lines.append(f"# {key} is unset  ({source})")
            else:
                lines.append(f"{key} = {toml_value(value)}  # {source}")
    return "\n".join(lines)


def toml_value(value: Any) -> str:
    """One TOML value: strings quoted, lists as arrays, tables inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are valid in TOML basic strings
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items())
        return "{" + (f" {items} " if items else "") + "}"
    raise TypeError(f"no TOML form for {value!r}")
