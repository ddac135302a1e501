"""End to end: the patched model against the original, outputs and time.

Outputs are compared with the judge's tolerance (evaluate/analysis/tolerance.py) on
fresh inputs drawn like the example inputs. Times are a verdict's call time
(host time per call in a loop of calls, synchronised at the ends, launch
overhead included), samples interleaved round by round, median and IQR, in
eager and under torch.compile. Without a GPU they are CPU times and say so.
"""

from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from kernelevo.config import tolerances
from kernelevo.evaluate.analysis.tolerance import compare_tensor
from kernelevo.evaluate.child.timing import summarize
from kernelevo.evaluate.verdict import TimingStats
from kernelevo.model.extract import draw_input
from kernelevo.model.profile import input_spec

OP_MARK = "kernelevo_model"


@dataclass(frozen=True)
class Verification:
    """The patched model's outputs and times against the original's."""

    device: str
    clock: str  # what the times are: "CPU" or "GPU (host call time)"
    correct: bool
    sets: int
    max_abs_error: float
    message: str
    compile_backend: str
    graph_breaks: int | None
    kernel_ops_in_graph: int | None
    timings: dict[str, TimingStats] = field(default_factory=dict)
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fresh_inputs(example: tuple[Any, ...], seed: int) -> list[Any]:
    """Inputs of the example's shapes, dtypes and value ranges, drawn under `seed`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return [draw_input(input_spec(x), x.dtype, x.device)
                if isinstance(x, torch.Tensor) else x for x in example]


def check_outputs(original: torch.nn.Module, patched: torch.nn.Module,
                  example: tuple[Any, ...], sets: int = 3) -> tuple[bool, float, str]:
    """(correct, max abs error, message) over `sets` fresh input sets."""
    worst = 0.0
    for index in range(sets):
        inputs = fresh_inputs(example, seed=1000 + index)
        with torch.no_grad():
            expected, got = _flat(original(*inputs)), _flat(patched(*inputs))
        if len(expected) != len(got):
            return False, worst, f"set {index}: {len(got)} outputs, expected {len(expected)}"
        for position, (out, ref) in enumerate(zip(got, expected)):
            atol, rtol = tolerances(str(ref.dtype).removeprefix("torch."))
            result = compare_tensor(out, ref, atol, rtol, label=f"set {index} output {position}")
            if result.reason:
                return False, worst, result.message
            worst = max(worst, result.metrics.max_abs_error if result.metrics else 0.0)
    return True, worst, ""


def _flat(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _flat(item)]
    if isinstance(value, dict):
        return [t for key in sorted(value) for t in _flat(value[key])]
    return []


def compile_check(patched: torch.nn.Module,
                  inputs: list[Any]) -> tuple[int | None, int | None, str]:
    """(graph breaks, our ops in the graphs, note) of the patched model under torch.compile."""
    found: list[int] = []

    def counting(graph: Any, example_inputs: Any) -> Any:
        found.append(sum(1 for node in graph.graph.nodes if OP_MARK in str(node.target)))
        return graph.forward

    try:
        explained = torch._dynamo.explain(patched)(*inputs)
        with torch.no_grad():
            torch.compile(patched, backend=counting)(*inputs)
    except Exception as exc:  # a model dynamo cannot trace at all is a finding, not a crash
        return None, None, f"torch.compile failed: {type(exc).__name__}: {exc}"
    reasons = "; ".join(str(getattr(r, "reason", r)) for r in explained.break_reasons)
    note = f"graph breaks: {reasons}" if reasons else ""
    return explained.graph_break_count, sum(found), note


def time_contestants(contestants: dict[str, Callable[[], Any]], *, device: str,
                     rounds: int = 10, sample_ms: float = 20.0) -> dict[str, TimingStats]:
    """Call time per contestant: interleaved rounds, each sample a loop of calls."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    loops = {name: _loop_length(call, sync, sample_ms) for name, call in contestants.items()}
    samples: dict[str, list[float]] = {name: [] for name in contestants}
    names = list(contestants)
    collecting = gc.isenabled()
    gc.disable()  # a collection would land on whichever call triggers it
    try:
        for round_index in range(rounds):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                sync()
                start = time.perf_counter()
                for _ in range(loops[name]):
                    contestants[name]()
                sync()
                samples[name].append((time.perf_counter() - start) * 1000 / loops[name])
    finally:
        if collecting:
            gc.enable()
    return {name: summarize(values, "call") for name, values in samples.items()}


def _loop_length(call: Callable[[], Any], sync: Callable[[], Any], sample_ms: float) -> int:
    for _ in range(3):  # warm-up: compilation, autotuning and caches out of the samples
        call()
    sync()
    start = time.perf_counter()
    call()
    sync()
    one_ms = max((time.perf_counter() - start) * 1000, 1e-3)
    return max(1, min(1000, int(sample_ms / one_ms)))


def verify(original: torch.nn.Module, patched: torch.nn.Module, example: tuple[Any, ...], *,
           device: str, compile_backend: str | None = None, timed: bool = True,
           rounds: int | None = None) -> Verification:
    """Outputs on fresh inputs, torch.compile's view of the patched model, and times."""
    backend = compile_backend or ("inductor" if device == "cuda" else "aot_eager")
    correct, worst, message = check_outputs(original, patched, example)
    inputs = fresh_inputs(example, seed=7)
    breaks, ops, note = compile_check(patched, inputs)
    notes = [n for n in (note,) if n]
    if device != "cuda":
        notes.append("no GPU: times are CPU times, Triton kernels ran under the interpreter")
    timings: dict[str, TimingStats] = {}
    if timed and correct:
        # Interpreted Triton on a CPU takes seconds a forward: fewer rounds there.
        rounds = rounds or (10 if device == "cuda" else 3)
        timings = _timings(original, patched, inputs, device, backend, rounds)
    clock = "GPU (host call time)" if device == "cuda" else "CPU"
    return Verification(device, clock, correct, 3, worst, message, backend, breaks, ops,
                        timings, _ratio(timings, "eager"), _ratio(timings, "compile"),
                        tuple(notes))


def _timings(original: torch.nn.Module, patched: torch.nn.Module, inputs: list[Any],
             device: str, backend: str, rounds: int) -> dict[str, TimingStats]:
    compiled_original = torch.compile(original, backend=backend)
    compiled_patched = torch.compile(patched, backend=backend)

    def call(model: Callable[..., Any]) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return model(*inputs)
        return run

    return time_contestants({"eager_original": call(original), "eager_patched": call(patched),
                             "compile_original": call(compiled_original),
                             "compile_patched": call(compiled_patched)},
                            device=device, rounds=rounds)


def _ratio(timings: dict[str, TimingStats], mode: str) -> float | None:
    base, own = timings.get(f"{mode}_original"), timings.get(f"{mode}_patched")
    return base.median_ms / own.median_ms if base and own and own.median_ms else None
