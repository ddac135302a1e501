"""The analytic cost of a task: bytes it must move and FLOPs it must do.

Bytes: every input, output and parameter tensor once (what an ideal fused
kernel reads and writes; intermediates are free). FLOPs: matrix products,
convolutions and attention by `torch.utils.flop_counter.FlopCounterMode`;
the other compute ops it does not count, by this module's rule:
- a pointwise op: 1 FLOP per output element (an exp, a gelu or a relu is one);
- a reduction (sum, mean, amax, ...): 1 FLOP per input element;
- a composite normalisation: a fixed count per input element, in COMPOSITE_FLOPS.
Ops that only move, view or allocate data count nothing (oplog.NON_COMPUTE_OPS).
It runs the reference once, on the meta device where it can (no data, no time).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from kernelevo.evaluate.analysis.profile import Cost
from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.oplog import NON_COMPUTE_OPS

# Reductions: their output is small, their work is one step per input element.
REDUCTION_OPS = frozenset("""
sum mean amax amin max min prod norm linalg_vector_norm var std var_mean std_mean logsumexp
argmax argmin cumsum cumprod all any nansum
""".split())
# Composite normalisations, FLOPs per input element:
# softmax: max, subtract, exp, sum, divide; log_softmax: max, subtract, exp, sum, log-subtract;
# layer/group/batch norm: mean, centre, square, sum, scale by rstd, weight, bias.
COMPOSITE_FLOPS = {"_softmax": 5, "softmax": 5, "_log_softmax": 5, "log_softmax": 5,
                   "native_layer_norm": 7, "native_group_norm": 7,
                   "native_batch_norm": 7, "_native_batch_norm_legit_no_training": 7}
class _ElementCounter(TorchDispatchMode):
    """Counts the compute ops FlopCounterMode leaves out, by this module's rule."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket not in flop_registry:
            self.flops += element_flops(func.overloadpacket.__name__, args, out)
        return out


def element_flops(name: str, args: Any, out: Any) -> int:
    """FLOPs of one non-matmul op by the counting rule (0 for data movement)."""
    name = name.rstrip("_") if name not in NON_COMPUTE_OPS else name
    if name in NON_COMPUTE_OPS:
        return 0
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if name in COMPOSITE_FLOPS and first is not None:
        return COMPOSITE_FLOPS[name] * first.numel()
    if name in REDUCTION_OPS and first is not None:
        return first.numel()
    result = out[0] if isinstance(out, (tuple, list)) and out else out
    return result.numel() if isinstance(result, torch.Tensor) else 0


def count_call(call: Callable[[], Any], inputs: list[Any], parameters: list[Any],
               device: str) -> Cost:
    """The cost of one call of `call` (the reference on `inputs`, with `parameters`)."""
    counter, flop_counter = _ElementCounter(), FlopCounterMode(display=False)
    with torch.no_grad(), flop_counter, counter:
        outputs = call()
    values, _ = task_inputs.flatten_outputs(outputs)
    moved = (task_inputs.tensor_bytes(list(inputs)) + task_inputs.tensor_bytes(list(values))
             + task_inputs.tensor_bytes(list(parameters)))
    return Cost(moved, int(flop_counter.get_total_flops()), counter.flops, device)


def model_cost(model: Any, inputs: list[Any], device: str) -> Cost:
    """The cost of `model(*inputs)`, run once wherever the tensors live."""
    parameters = list(model.parameters()) if hasattr(model, "parameters") else []
    buffers = list(model.buffers()) if hasattr(model, "buffers") else []
    return count_call(lambda: model(*inputs), inputs, parameters + buffers, device)


def task_cost(module: ModuleType, dtype: torch.dtype) -> Cost:
    """The cost of a loaded task module's reference, on the meta device (no data made)."""
    with torch.device("meta"):
        torch.manual_seed(0)
        model = module.Model(*list(module.get_init_inputs()))
        if hasattr(model, "to"):
            model = model.to(dtype=dtype)
    inputs = task_inputs.make_inputs(module, 0, "meta", dtype)
    return model_cost(model, inputs, "meta")
