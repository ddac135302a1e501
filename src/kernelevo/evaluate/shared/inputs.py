"""Loading task and candidate modules and making input sets inside child processes.

Both the oracle and the candidate worker rebuild the same inputs from the same
seeds on the device, so no input tensor has to travel between processes.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

# KernelBench seeds the parameters of Model and ModelNew with this value.
WEIGHT_SEED = 42


class InputError(Exception):
    """get_inputs() returned something that cannot be an input set."""


def import_source(source: str, module_name: str, folder: Path,
                  task_folder: str = "") -> ModuleType:
    """Import a source string as a real file (Triton reads kernel source from disk).

    `task_folder`, the folder of the task's file, goes first on the import
    path, so a task imports the modules beside it as it would run as a script.
    """
    if task_folder and task_folder not in sys.path:
        sys.path.insert(0, task_folder)
    path = folder / f"{module_name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def set_reference_precision() -> None:
    """The reference computes in the precision it asks for: no TF32."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def set_user_backend(conv_tf32: bool) -> str:
    """PyTorch's default backend settings, as a user's process runs; returns them in words.

    Strict numerics (deterministic cuDNN) are for the reference's correctness:
    timed under them, cuDNN's transposed 3-D convolutions ran 35x slower than
    a user's. `conv_tf32` is PyTorch's own default for fp32 convolutions; off,
    the contestants compute in the fp32 the verdict checks (matmuls stay fp32
    either way, as PyTorch's default has them).
    """
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = conv_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    return user_backend_words(conv_tf32)


def user_backend_words(conv_tf32: bool) -> str:
    """The contestants' backend settings, as verdicts state them."""
    return ("PyTorch defaults (cudnn.deterministic=False, cudnn.benchmark=False, "
            f"cudnn.allow_tf32={conv_tf32}, matmul.allow_tf32=False)")


def synchronize(device: str) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device != "cpu":
        torch.cuda.synchronize()


def peak_gpu_bytes(device: str) -> int:
    """The most GPU memory this process's allocator has held at once, in bytes (0 on the CPU).

    What it reserved, cached blocks and workspaces included; its CUDA context
    is not counted (suite/footprint.py prices that apart). A figure for sizing
    only: read in a worker after its candidate ran, so whatever that left of
    the allocator's API, a failure here is 0, never a reason for a verdict.
    """
    if device != "cuda":
        return 0
    try:
        return max(0, int(torch.cuda.max_memory_reserved()))
    except Exception:  # noqa: BLE001 - see above
        return 0


def build_model(cls: type, init_inputs: list[Any], device: str, dtype: torch.dtype) -> Any:
    """Construct under the KernelBench seed, then move to the device and precision."""
    torch.manual_seed(WEIGHT_SEED)
    model = cls(*init_inputs)
    return model.to(device=device, dtype=dtype) if hasattr(model, "to") else model


def constant_tensors(model: Any) -> list[str]:
    """The model's floating parameters and buffers of more than one value, all of them equal.

    Both sides build them as the task does, so a task that keeps a module's
    default initialisation (LayerNorm's weight of ones and bias of zeros) is
    judged with those values alone, and a kernel that leaves them out gives
    the same answer. Read after the reference ran: a buffer its forward
    updates (BatchNorm's running statistics in training mode) has moved by
    then, while one it only reads (the same in eval mode) has not.
    """
    if not isinstance(model, torch.nn.Module):
        return []
    found = []
    for kind, named in (("", model.named_parameters()), ("buffer, ", model.named_buffers())):
        for name, value in named:
            single = _single_value(value)
            if single is not None:
                found.append(f"{name} ({kind}all {single:g})")
    return found


def _single_value(value: torch.Tensor) -> float | None:
    """The value every element holds, for a floating tensor of more than one element."""
    # One element is always "all equal"; an integer buffer (a step count) is no weight.
    if not value.is_floating_point() or value.numel() < 2:
        return None
    # Two reductions, no tensor of the weight's size made; NaN is never equal to itself.
    low, high = torch.aminmax(value.detach())
    return float(low) if bool(low == high) else None


def make_inputs(module: ModuleType, seed: int, device: str, dtype: torch.dtype,
                variant: float | None = None) -> list[Any]:
    """One input set from get_inputs() under `seed`, on the device and in `dtype`.

    `variant`, when given, is the scale of a stress set: floating inputs are
    rescaled (see stress_tensor) so a shortcut tuned to the task's input
    distribution cannot pass, while what the task's inputs guarantee holds.
    """
    torch.manual_seed(seed)
    with torch.device(device):
        raw = module.get_inputs()
    if not isinstance(raw, (list, tuple)):
        raise InputError(f"get_inputs() returned {type(raw).__name__}; it must return a list")
    inputs = []
    for position, value in enumerate(raw):
        inputs.append(_prepare(value, position, device, dtype, variant))
    return inputs


def _prepare(value: Any, position: int, device: str, dtype: torch.dtype,
             variant: float | None) -> Any:
    if isinstance(value, torch.Tensor):
        tensor = value.to(device)
        if tensor.is_floating_point():
            tensor = tensor.to(dtype)
            if variant is not None:
                tensor = stress_tensor(tensor, variant)
        return tensor.contiguous() if not tensor.is_contiguous() else tensor
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    raise InputError(
        f"get_inputs()[{position}] is {type(value).__name__}: inputs must be tensors "
        "or plain numbers"
    )


# A floating tensor with at most this many distinct values is categorical
# (a mask, labels, +-1 targets): its values are the contract, not a distribution.
_DISCRETE_VALUES = 16


def stress_tensor(tensor: torch.Tensor, scale: float) -> torch.Tensor:
    """The stress version of one floating input: rescaled, its guarantees kept.

    Scaling by a positive factor keeps every linear structure a task may
    promise (zeros where they were, so triangular, diagonal and sparse
    patterns; symmetry; sign). The shift, which moves a zero-mean
    distribution off zero, is added only where it breaks nothing: never when
    the tensor has exact zeros, and with the sign of a one-signed tensor.
    Categorical tensors and probability rows stay as they are.
    """
    if tensor.numel() == 0 or is_discrete(tensor) or is_distribution(tensor):
        return tensor
    # Values must reach about 4 * scale whatever the task's range: randn peaks
    # near 4, but torch.rand stays under 1, where exp() never overflows.
    peak = float(tensor.abs().max())
    factor = max(scale, 4 * scale / peak) if peak > 0 else scale
    scaled = tensor * factor
    if bool((tensor == 0).any()):
        return scaled
    shift = -scale / 4 if bool((tensor <= 0).all()) else scale / 4
    return scaled + shift


def is_distribution(tensor: torch.Tensor) -> bool:
    """True for probability rows: values in [0, 1] summing to 1 along the last dim.

    Scaled, they are no distribution; a loss such as KL divergence on them is
    then mostly cancellation, and honest kernels would fail on rounding.
    """
    if tensor.dim() == 0 or tensor.shape[-1] < 2:
        return False
    if bool((tensor < 0).any()) or bool((tensor > 1).any()):
        return False
    sums = tensor.sum(dim=-1, dtype=torch.float64)  # no float64 copy of the whole tensor
    return bool(((sums - 1).abs() < 1e-3).all())


def is_discrete(tensor: torch.Tensor) -> bool:
    """True when the tensor takes only a handful of distinct values."""
    if tensor.numel() <= _DISCRETE_VALUES:
        return False
    # A prefix decides cheaply for the common, continuous case.
    head = tensor.reshape(-1)[:4096]
    if torch.unique(head).numel() > _DISCRETE_VALUES:
        return False
    return torch.unique(tensor).numel() <= _DISCRETE_VALUES


def describe_stress(inputs: list[Any], scale: float) -> str:
    """How a stress set was made and the range of its floating inputs, for verdicts."""
    ranges = [f"input {i} in [{float(x.min()):.3g}, {float(x.max()):.3g}]"
              for i, x in enumerate(inputs)
              if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel()]
    where = "; ".join(ranges[:4]) if ranges else "no floating inputs"
    return (f"stress set of scale {scale:.3g}: floating inputs rescaled to reach about "
            f"{4 * scale:.3g}, structure kept; {where}")


def clone_inputs(inputs: list[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def flatten_outputs(output: Any) -> tuple[list[Any], str]:
    """Outputs as a flat list plus a structure string ('tensor', 'tuple:2')."""
    if isinstance(output, (tuple, list)):
        return list(output), f"{type(output).__name__}:{len(output)}"
    return [output], "tensor"


def tensor_bytes(values: list[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


_KEPT: dict[tuple[Any, ...], list[Any]] = {}
_KEEP_LIMIT_BYTES = 2 << 30  # larger sets are made again each time, not held


def kept_inputs(module: ModuleType, seed: int, device: str, dtype: torch.dtype,
                variant: float | None = None) -> list[Any]:
    """make_inputs(), made once per process and kept: a worker needs each set several times.

    The lists returned are shared and must stay pristine: callers only read
    them or clone them (clone_inputs) before anything untrusted sees them.
    On a GPU machine making a 4096x4096 set on the CPU took about 0.12 s.
    """
    key = (id(module), seed, device, str(dtype), variant)
    if key not in _KEPT:
        values = make_inputs(module, seed, device, dtype, variant)
        if tensor_bytes(values) > _KEEP_LIMIT_BYTES:
            return values
        _KEPT[key] = values
    return _KEPT[key]

