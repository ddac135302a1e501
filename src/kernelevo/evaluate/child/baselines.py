"""The baselines of a worker: the reference model, eager and torch.compile, built and warmed.

Built on throwaway inputs while the oracle computes the reference in its own
process, before any candidate loads. torch.compile is timed as compile users
get it: per call of the task inside one compiled model of several calls
(`CompiledInAModel`).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import torch

from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.messages import WorkerJob


class Baselines:
    """The reference model, eager and compiled, warmed up before any candidate loads."""

    def __init__(self, contestants: dict[str, Any], notes: list[str],
                 compile_s: float | None, steps: dict[str, float]) -> None:
        self.contestants, self.notes, self.compile_s = contestants, notes, compile_s
        self.steps = steps  # seconds of each warm-up step, for the verdict's phases


class GpuPhases(Protocol):
    """The worker's hold on its GPU's gate during the warm-up (session.py)."""

    def cpu_only(self) -> None:
        """No kernels for a while: the hold may go."""

    def kernels(self) -> None:
        """Kernels next: the hold is taken again (a no-op while held)."""


def warm_baselines(task: Any, job: WorkerJob, gpu: GpuPhases | None = None) -> Baselines:
    """Build and warm eager and torch.compile on throwaway inputs (never the judged ones).

    torch.compile's compile (tracing, Inductor's code generation, Triton's
    compiles) runs no kernels: with `gpu`, the hold on the GPU goes for it,
    so a timing phase elsewhere on the GPU need not wait seconds for it. It
    is taken again as the first compiled graph is about to run (its
    autotuning and first call are kernels).
    """
    device, dtype, config = job.device, getattr(torch, job.dtype), job.timing
    steps = {}
    timed = _TimedPhases(gpu) if gpu is not None else None
    started = time.perf_counter()
    reference = task_inputs.build_model(task.Model, list(task.get_init_inputs()), device, dtype)
    warm_inputs = task_inputs.make_inputs(task, 0, device, dtype)
    torch.cuda.synchronize()
    steps["model_inputs"] = time.perf_counter() - started
    contestants: dict[str, Any] = {}
    notes: list[str] = []
    compile_s = None
    if "eager" in config.baselines:
        contestants["eager"] = reference
    if "compile" in config.baselines:
        started = time.perf_counter()
        try:
            calls = model_calls(config.compile_model_calls, warm_inputs, device)
            if calls < config.compile_model_calls:
                notes.append(f"torch.compile timed inside a model of {calls} call(s) of the "
                             f"task, not {config.compile_model_calls}: the other calls' input "
                             "sets and outputs would crowd the GPU's memory")
            # the other calls' input sets are kernels too: made before the hold goes
            extra = [task_inputs.make_inputs(task, seed, device, dtype)
                     for seed in range(1, calls)]
            if timed is not None:  # before torch.compile's set-up too: CPU work, seconds cold
                steps["pattern_init"] = _inductor_pattern_init(device)
                torch.cuda.synchronize()  # the model's and inputs' kernels are done
                timed.cpu_only()
            import torch._inductor.config as inductor_config

            inductor_config.compile_threads = 1  # no pool of compile processes in a worker
            compiled = CompiledInAModel(
                torch.compile(InAModel(reference), backend=_kernels_after_compile(timed)),
                extra)
            with torch.no_grad():
                compiled(*warm_inputs)
            if job.backward:  # AOTAutograd's forward and backward graphs, compiled now
                _train_once(compiled, warm_inputs)
            torch.cuda.synchronize()
            contestants["compile"] = compiled
        except Exception as exc:  # a baseline that cannot compile is reported, not fatal
            notes.append(f"torch.compile baseline failed: {type(exc).__name__}: {exc}"[:300])
        finally:
            if timed is not None:
                timed.kernels()
        # The compile's own seconds: its waits for the GPU (behind other lanes'
        # timings) are a step of their own, not the compile's cost.
        waited = timed.waited_s if timed is not None else 0.0
        compile_s = time.perf_counter() - started - waited
        steps["compile_gpu_wait"] = waited
    torch.cuda.synchronize()
    return Baselines(contestants, notes, compile_s, steps)


class _TimedPhases:
    """`GpuPhases` that counts the seconds spent waiting for the hold to come back."""

    def __init__(self, gpu: GpuPhases) -> None:
        self.gpu, self.waited_s = gpu, 0.0

    def cpu_only(self) -> None:
        self.gpu.cpu_only()

    def kernels(self) -> None:
        started = time.perf_counter()
        self.gpu.kernels()
        self.waited_s += time.perf_counter() - started


def _train_once(compiled: "CompiledInAModel", warm_inputs: list[Any]) -> None:
    """One forward with grad and a backward of the compiled model, so timing pays no compile.

    As timing_backward.py trains it: every call's floating inputs require grad.
    """
    def leaves(values: list[Any]) -> list[Any]:
        return [v.detach().clone().requires_grad_(True)
                if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]

    with torch.enable_grad():
        outputs = compiled.compiled(leaves(warm_inputs), *[leaves(e) for e in compiled.extra])
        flat = [v for v in torch.utils._pytree.tree_leaves(outputs)
                if isinstance(v, torch.Tensor) and v.grad_fn is not None]
        if flat:
            torch.autograd.backward(flat, [torch.ones_like(v) for v in flat])
    for parameter in compiled.compiled.parameters():
        parameter.grad = None


EXTRA_SETS_BYTES = 1 << 30  # the compiled model's other calls: inputs and outputs


class InAModel(torch.nn.Module):
    """The task's model called on several input sets in one forward: one part of a larger model."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, *sets: list[Any]) -> tuple[Any, ...]:
        return tuple(self.model(*inputs) for inputs in sets)


class CompiledInAModel:
    """torch.compile's baseline as compile users get it: a call of the task inside a compiled model.

    A compile user compiles the whole model: dynamo's guards and the entry
    into the compiled code are paid once per model call, not once per small
    module. Timed alone, a small task's compiled module paid them on every
    call (30-125 us on an H100; guards were the least of it: skipping them
    saved nothing, bench/host_noise.py). Here the compiled model calls the
    task on the timed inputs and on `extra` fixed sets; the timing divides
    each invocation's time by `calls_per_invocation`.
    """

    def __init__(self, compiled: Any, extra: list[list[Any]]) -> None:
        self.compiled, self.extra = compiled, extra
        self.calls_per_invocation = 1 + len(extra)

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        return self.compiled(list(inputs), *self.extra)


def model_calls(wanted: int, inputs: list[Any], device: str) -> int:
    """Calls of the task in the compiled model: `wanted`, fewer where their sets would crowd the GPU.

    The other calls' input sets and outputs stay within `EXTRA_SETS_BYTES`
    and a sixteenth of the free memory (the judge's other processes hold
    sets too). A task whose sets are that large runs long enough that
    compiled code's entry (30-125 us) is a small part of a call.
    """
    if wanted <= 1 or device != "cuda":
        return max(1, wanted)
    set_bytes = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
    free, _ = torch.cuda.mem_get_info()
    # each call holds its inputs and, about as large, its outputs
    room = min(EXTRA_SETS_BYTES, free // 16)
    return max(1, min(wanted, 1 + int(room // max(2 * set_bytes, 1))))


def _inductor_pattern_init(device: str) -> float:
    """Inductor's one-time set-up of its graph patterns for `device`, run now; seconds.

    The first compile in a process sets up Inductor's attention patterns for
    the graph's device, and their scalar constants are copied to the GPU (48
    small copies on an H200, bench/compile_window_copies.py): run here, they
    are made while the worker still holds its share of the GPU, and the
    compile that follows, with no hold, makes none.
    """
    started = time.perf_counter()
    if device == "cuda":
        try:
            from torch._inductor.fx_passes.joint_graph import lazy_init
        except ImportError:  # an Inductor without it: nothing to set up ahead
            return 0.0
        lazy_init(torch.device("cuda", torch.cuda.current_device()))  # as compile_fx calls it
    return time.perf_counter() - started


def _kernels_after_compile(gpu: GpuPhases | None) -> Any:
    """torch.compile's own Inductor backend, taking the GPU's hold before a graph it compiled runs.

    The same backend as `torch.compile(model)` uses (its options, its
    caches); the hold is asked for between the compile and the first run of
    each graph (after the first, a no-op). An older PyTorch without that
    class: plain Inductor, with the hold taken up front.
    """
    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    if gpu is None or wrapper is None:
        if gpu is not None:
            gpu.kernels()
        return "inductor"
    phases: GpuPhases = gpu  # not None from here: a name the class below sees as such

    class KernelsAfterCompile(wrapper):  # type: ignore[misc, valid-type]
        def __call__(self, model: Any, inputs: Any, **kwargs: Any) -> Any:
            compiled = super().__call__(model, inputs, **kwargs)
            phases.kernels()
            return compiled

    backend = KernelsAfterCompile(None, None, None)  # torch.compile's mode, options, dynamic
    backend.__name__ = "inductor"  # the name torch.compile gives it in its logs
    return backend
