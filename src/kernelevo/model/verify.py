"""End to end: the patched model against the original, outputs and time.

Outputs are compared with the judge's tolerance (evaluate/analysis/tolerance.py) on
fresh inputs drawn like the example inputs. Times are a verdict's call time
(host time per call in a loop of calls, synchronised at the ends, launch
overhead included), samples interleaved round by round, median and IQR, in
eager and under torch.compile. Without a GPU they are CPU times and say so.

In training mode (a model patched with training kernels) the patched model
also trains a few SGD steps from the original's weights on one batch, its
losses and first gradients held to the same tolerance, and what is timed is
the training step, forward and backward (no optimiser step), instead of the
forward alone. Both models get their weights back afterwards.
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

import torch

from kernelevo.config import tolerances
from kernelevo.evaluate.analysis.tolerance import compare_tensor
from kernelevo.evaluate.child.timing import summarize
from kernelevo.evaluate.verdict import TimingStats
from kernelevo.model.extract import draw_input
from kernelevo.model.profile import input_spec

OP_MARK = "kernelevo_model"
TRAIN_STEPS = 3
TRAIN_LR = 0.1


@dataclass(frozen=True)
class TrainingCheck:
    """SGD steps of the patched model against the original's, from the same weights."""

    correct: bool
    steps: int
    losses_original: tuple[float, ...]
    losses_patched: tuple[float, ...]
    max_grad_error: float  # over the first step's gradients of every parameter
    message: str


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
    mode: str = "inference"  # "training": the training step checked and timed
    training: TrainingCheck | None = None

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


def check_training(original: torch.nn.Module, patched: torch.nn.Module,
                   example: tuple[Any, ...], device: str,
                   steps: int = TRAIN_STEPS) -> TrainingCheck:
    """Losses of `steps` SGD steps on one fresh batch, and the first step's gradients."""
    inputs = fresh_inputs(example, seed=2000)
    with restored(original), restored(patched):
        expected_losses, expected_grads = _sgd(original, inputs, device, steps)
        try:
            got_losses, got_grads = _sgd(patched, inputs, device, steps)
        except Exception as exc:  # a kernel's backward that raises is a finding, not a crash
            return TrainingCheck(False, steps, tuple(expected_losses), (), 0.0,
                                 f"training the patched model raised {type(exc).__name__}: {exc}")
    worst, message = _gradients_compared(got_grads, expected_grads)
    if not message:
        # The model's dtype sets the tolerance: an fp16 model's losses differ as its outputs do.
        dtype = next(iter(expected_grads.values())).dtype if expected_grads else torch.float32
        atol, rtol = tolerances(str(dtype).removeprefix("torch."))
        result = compare_tensor(torch.tensor(got_losses), torch.tensor(expected_losses), atol,
                                rtol, label=f"the losses of {steps} SGD steps")
        message = result.message if result.reason else ""
    return TrainingCheck(not message, steps, tuple(expected_losses), tuple(got_losses), worst,
                         message)


def _gradients_compared(got: dict[str, torch.Tensor],
                        expected: dict[str, torch.Tensor]) -> tuple[float, str]:
    """(max abs error, the first mismatch's message or "") over every parameter's gradient."""
    worst = 0.0
    for name, theirs in expected.items():
        mine = got.get(name)
        if mine is None:
            return worst, f"the patched model has no parameter {name}"
        atol, rtol = tolerances(str(theirs.dtype).removeprefix("torch."))
        result = compare_tensor(mine, theirs, atol, rtol,
                                label=f"the gradient of {name} at training step 1")
        if result.reason:
            return worst, result.message
        worst = max(worst, result.metrics.max_abs_error if result.metrics else 0.0)
    return worst, ""


@contextmanager
def restored(model: torch.nn.Module) -> Iterator[None]:
    """The model's weights, buffers and gradients as they were once the block ends.

    Loaded in place, so a kernel sharing the model's tensors keeps sharing them.
    """
    saved = {key: value.detach().clone() for key, value in model.state_dict().items()}
    try:
        yield
    finally:
        model.load_state_dict(saved)
        model.zero_grad(set_to_none=True)


def _sgd(model: torch.nn.Module, inputs: list[Any], device: str,
         steps: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Losses of plain SGD steps (MSE to a fixed random target) and the first step's gradients."""
    optimiser = torch.optim.SGD(model.parameters(), lr=TRAIN_LR)
    losses: list[float] = []
    first: dict[str, torch.Tensor] = {}
    devices = [torch.cuda.current_device()] if device == "cuda" else []
    for step in range(steps):
        # Both models draw alike in each step: dropout and the target, whatever ran before.
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(3000 + step)
            outputs = [o for o in _flat(model(*inputs)) if o.is_floating_point()]
            targets = [torch.randn_like(o) for o in outputs]
        loss = torch.stack([torch.nn.functional.mse_loss(o.float(), t.float())
                            for o, t in zip(outputs, targets)]).sum()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0:
            first = {name: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
                     for name, p in model.named_parameters() if p.requires_grad}
        optimiser.step()
        losses.append(loss.item())
    return losses, first


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
           rounds: int | None = None, training: bool = False) -> Verification:
    """Outputs on fresh inputs, torch.compile's view of the patched model, and times.

    `training`: SGD steps checked too, and the training step timed instead of the forward.
    """
    backend = compile_backend or ("inductor" if device == "cuda" else "aot_eager")
    correct, worst, message = check_outputs(original, patched, example)
    trained = check_training(original, patched, example, device) if training and correct \
        else None
    if trained is not None and not trained.correct:
        correct, message = False, trained.message
    inputs = fresh_inputs(example, seed=7)
    breaks, ops, note = compile_check(patched, inputs)
    notes = [n for n in (note,) if n]
    if device != "cuda":
        notes.append("no GPU: times are CPU times, Triton kernels ran under the interpreter")
    timings: dict[str, TimingStats] = {}
    if timed and correct:
        # Interpreted Triton on a CPU takes seconds a forward: fewer rounds there.
        rounds = rounds or (10 if device == "cuda" else 3)
        timings = _timings(original, patched, inputs, device, backend, rounds, training)
        if training:
            notes.append("times are of a training step: forward and backward, no optimiser step")
            for model in (original, patched):  # the timed backwards' gradients, summed up
                model.zero_grad(set_to_none=True)
    clock = "GPU (host call time)" if device == "cuda" else "CPU"
    return Verification(device, clock, correct, 3, worst, message, backend, breaks, ops,
                        timings, _ratio(timings, "eager"), _ratio(timings, "compile"),
                        tuple(notes), "training" if training else "inference", trained)


def _timings(original: torch.nn.Module, patched: torch.nn.Module, inputs: list[Any],
             device: str, backend: str, rounds: int,
             training: bool = False) -> dict[str, TimingStats]:
    compiled_original = torch.compile(original, backend=backend)
    compiled_patched = torch.compile(patched, backend=backend)

    def call(model: Callable[..., Any]) -> Callable[[], Any]:
        if training:
            return _training_step(model, inputs)

        def run() -> Any:
            with torch.no_grad():
                return model(*inputs)
        return run

    return time_contestants({"eager_original": call(original), "eager_patched": call(patched),
                             "compile_original": call(compiled_original),
                             "compile_patched": call(compiled_patched)},
                            device=device, rounds=rounds)


def _training_step(model: Callable[..., Any], inputs: list[Any]) -> Callable[[], Any]:
    """One call: forward, then backward of the floating outputs' sum (the same for both)."""
    def run() -> Any:
        outputs = [o for o in _flat(model(*inputs)) if o.is_floating_point()]
        torch.autograd.backward([o.sum() for o in outputs])
    return run


def _ratio(timings: dict[str, TimingStats], mode: str) -> float | None:
    base, own = timings.get(f"{mode}_original"), timings.get(f"{mode}_patched")
    return base.median_ms / own.median_ms if base and own and own.median_ms else None
