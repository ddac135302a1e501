"""How much GPU memory a lane judging a task may hold, estimated from the task's sizes.

The task's module knows its inputs: its `get_inputs()`, its `Model` and one
forward run on the meta device (nothing is allocated), so the bytes of one
input set, of its outputs, of the forward's intermediates at their peak and
of the parameters come without a GPU. A lane holds its processes' CUDA
contexts, and for each session it keeps (the evaluation, and the standby
kept warm for a task's next solution) what its oracle and worker hold at
their peaks, and the re-check's two beside them.

What those processes hold is fitted to the task's sizes: each process's
allocator peak, recorded by GPU suites on KernelBench's level 1 and 2
(104 tasks, four passes on two H100s, sessions 31 and 37), by least squares
on the five terms below (`python bench/lane_memory_fit.py`, bench/RESULTS.md).
Fitted on one machine's first pass alone, it held the three other passes'
rows within 0.79-1.04x at the 10th and 90th percentiles. The estimate it
replaced counted five copies of one input set and its outputs: the lanes'
sizes never summed to the GPU's memory in passes where rows ran out of it.
A task whose estimate is still short and runs out is run again alone
(suite/alone.py); an estimate too large idles lanes.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from kernelevo.task import Task

# Processes of one session that hold a CUDA context: its oracle and its worker. A lane
# runs its evaluation's, the re-check's beside it where shapes are varied, and a
# standby session's where the task has another solution to judge.
SESSION_PROCESSES = 2
LANE_PROCESSES = 6  # the most a lane runs at once: all three sessions'
CONTEXT_BYTES = 512 << 20  # one process's CUDA context, kernels and allocator start


def lane_processes(sessions: int = 1, recheck: bool = True) -> int:
    """The processes a lane runs at once: `sessions` evaluations' (one, or two with a
    standby) and the re-check's (`recheck`)."""
    return SESSION_PROCESSES * (sessions + int(recheck))


def lane_contexts(sessions: int = 1, recheck: bool = True) -> int:
    """Bytes of the CUDA contexts of a lane's processes (`lane_processes`)."""
    return lane_processes(sessions, recheck) * CONTEXT_BYTES

_GIB = 1 << 30
# GiB an evaluation's oracle and worker held at their peaks, together, per GiB of each
# term ("fixed": one): `bench/lane_memory_fit.py` over sessions 31 and 37's four passes.
SESSION_FIT = {"fixed": 0.91, "inputs": 24.158, "outputs": 19.704, "live": 2.438,
               "parameters": 1.824}
# The same for the re-check at other sizes beside it (session 37's passes, which record it).
RECHECK_FIT = {"fixed": 0.829, "inputs": 2.763, "outputs": 7.66, "live": 1.295,
               "parameters": 0.527}
# Input sets the fits were recorded with (the default): more sets, more copies of them.
FITTED_INPUT_SETS = 3
_FLOAT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@dataclass(frozen=True)
class Footprint:
    """Bytes of one input set, its outputs, the model's parameters and the forward's
    intermediates at their peak, at the judged precision."""

    input_bytes: int
    output_bytes: int
    parameter_bytes: int
    live_bytes: int = 0

    def lane_bytes(self, input_sets: int = FITTED_INPUT_SETS, sessions: int = 1,
                   recheck: bool = True) -> int:
        """GPU memory a lane judging this task may hold at once, in bytes (an estimate):
        its contexts, `sessions` evaluations' processes, and the re-check's (`recheck`)."""
        held = sessions * self._fitted(SESSION_FIT, input_sets)
        if recheck:
            held += self._fitted(RECHECK_FIT, input_sets)
        return lane_contexts(sessions, recheck) + int(held * _GIB)

    def _fitted(self, fit: dict[str, float], input_sets: int) -> float:
        copies = (input_sets + 2) / (FITTED_INPUT_SETS + 2)  # the sets, the timing's two
        return (fit["fixed"] + copies * (fit["inputs"] * self.input_bytes
                                         + fit["outputs"] * self.output_bytes) / _GIB
                + (fit["live"] * self.live_bytes + fit["parameters"] * self.parameter_bytes)
                / _GIB)


# What a lane holds for a task of no size: its processes' contexts, one evaluation's
# processes and the re-check's.
LANE_MIN_BYTES = Footprint(0, 0, 0).lane_bytes()


def measure_footprint(task: Task, dtype_name: str = "float32") -> Footprint:
    """The task's footprint from a run on the meta device (outputs taken as the inputs'
    size, and no intermediates, where its forward cannot run there)."""
    import torch

    from kernelevo.suite.shrink import meta_module

    float_bytes = _FLOAT_BYTES.get(dtype_name, 4)
    module = meta_module(task)
    with torch.device("meta"):
        inputs = list(module.get_inputs())
        input_bytes = _bytes(inputs, float_bytes)
        try:
            model = module.Model(*module.get_init_inputs())
            parameters = [*model.parameters(), *model.buffers()]
            with torch.no_grad(), _live_peak(float_bytes) as live:
                outputs = model(*inputs)
            output_bytes, live_bytes = _bytes(_flat(outputs), float_bytes), live.peak
        except Exception:  # noqa: BLE001 - an estimate: ops the meta device lacks
            parameters, output_bytes, live_bytes = [], input_bytes, 0
    return Footprint(input_bytes, output_bytes, _bytes(parameters, float_bytes), live_bytes)


def _live_peak(float_bytes: int) -> Any:
    """A dispatch mode keeping the most bytes of tensors a forward made and held at once
    (views not counted; torch is imported late, so the class is made here)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class LivePeak(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live = self.peak = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            import torch

            out = func(*args, **(kwargs or {}))
            for value in out if isinstance(out, (list, tuple)) else [out]:
                if isinstance(value, torch.Tensor) and not value._is_view():
                    size = _bytes([value], float_bytes)
                    self.live += size
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(value, self._free, size)
            return out

        def _free(self, size: int) -> None:
            self.live -= size

    return LivePeak()


def _bytes(values: list[Any], float_bytes: int) -> int:
    """Bytes of the tensors among `values`, floating ones at the judged precision."""
    import torch

    total = 0
    for value in values:
        if isinstance(value, torch.Tensor):
            size = float_bytes if value.is_floating_point() else value.element_size()
            total += value.numel() * size
    return total


def _flat(output: Any) -> list[Any]:
    if isinstance(output, (list, tuple)):
        return [item for part in output for item in _flat(part)]
    if isinstance(output, dict):
        return [item for part in output.values() for item in _flat(part)]
    return [output]
