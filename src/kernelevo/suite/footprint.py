"""How much GPU memory a lane judging a task may hold, estimated from the task's sizes.

The task's module knows its inputs: its `get_inputs()`, its `Model` and one
forward run on the meta device (nothing is allocated), so the bytes of one
input set, of its outputs and of the parameters come without a GPU. A lane
holds more than one set of them at once: the oracle's reference outputs (one
per input set, kept in the judge's process too), the worker's inputs rotated
through timing, the baselines' and the candidate's models, the session kept
warm for the next solution and the re-check at other sizes, each process with
a CUDA context of its own. The estimate is coarse on purpose, and errs large:
a lane waits for memory rather than running a task into another lane's
memory, and a task that runs out anyway is run again alone (suite/alone.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelevo.task import Task

# Processes of one lane that hold a CUDA context at once: the evaluation's
# oracle and worker, the re-check's beside it, the standby session's two.
LANE_PROCESSES = 6
CONTEXT_BYTES = 512 << 20  # one process's CUDA context, kernels and allocator start
# Sessions of a lane holding a task's data at once: the evaluation and its standby.
SESSIONS_WITH_DATA = 2
_FLOAT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@dataclass(frozen=True)
class Footprint:
    """Bytes of one input set, its outputs and the model's parameters, at the judged precision."""

    input_bytes: int
    output_bytes: int
    parameter_bytes: int

    def lane_bytes(self, input_sets: int) -> int:
        """GPU memory a lane judging this task may hold at once, in bytes (an estimate)."""
        sets = input_sets + 2  # the reference's sets, and the timing's rotated copies
        per_session = 2 * self.parameter_bytes + sets * (self.input_bytes + self.output_bytes)
        return LANE_PROCESSES * CONTEXT_BYTES + SESSIONS_WITH_DATA * per_session


# What a lane holds for a task of no size: its processes' contexts.
LANE_MIN_BYTES = Footprint(0, 0, 0).lane_bytes(0)


def measure_footprint(task: Task, dtype_name: str = "float32") -> Footprint:
    """The task's footprint from a run on the meta device (outputs taken as the inputs'
    size where its forward cannot run there)."""
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
            output_bytes = _bytes(_flat(model(*inputs)), float_bytes)
        except Exception:  # noqa: BLE001 - an estimate: ops the meta device lacks
            parameters, output_bytes = [], input_bytes
    return Footprint(input_bytes, output_bytes, _bytes(parameters, float_bytes))


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
