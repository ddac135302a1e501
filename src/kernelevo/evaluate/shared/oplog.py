"""Which PyTorch operators a forward call dispatches, for the reference-reuse check."""

from __future__ import annotations

from collections.abc import Set
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Operators that allocate, view, move or describe data. Any program may use
# them; everything else counts as computing with PyTorch.
NON_COMPUTE_OPS = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like ones ones_like
full full_like new_zeros new_ones new_full fill fill_ zero_ copy_ _to_copy to clone
contiguous view _unsafe_view reshape _reshape_alias expand expand_as permute transpose t
as_strided slice select unsqueeze squeeze unsqueeze_ squeeze_ split split_with_sizes chunk
unbind narrow flatten unflatten view_as detach alias lift_fresh lift_fresh_copy resize_ set_
_local_scalar_dense item sym_size sym_stride sym_numel sym_storage_offset size stride
is_contiguous arange _has_compatible_shallow_copy_type is_same_size record_stream
""".split())


def _matmul_flops(name: str, args: Any, out: Any) -> int:
    """FLOPs of the matrix products and convolutions that dominate compute-bound tasks."""
    if name in ("mm", "addmm", "bmm", "baddbmm", "addbmm"):
        first = args[1] if name.startswith(("addmm", "baddbmm", "addbmm")) else args[0]
        return 2 * out.numel() * first.shape[-1]
    if name in ("convolution", "_convolution", "cudnn_convolution") and len(args) > 1:
        weight = args[1]
        return 2 * out.numel() * weight[0].numel()
    return 0


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.flops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        name = func.overloadpacket.__name__
        self.names.add(name)
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.flops += _matmul_flops(name, args, out)
        return out


def record_ops(call: Callable[[], Any]) -> tuple[Any, set[str], int]:
    """Run `call`; returns its result, the compute ops it dispatched and their matmul FLOPs."""
    recorder = _Recorder()
    with recorder:
        result = call()
    ops = {name for name in recorder.names if name not in NON_COMPUTE_OPS}
    return result, ops, recorder.flops


def reference_reused(reference_ops: Set[str], candidate_ops: Set[str]) -> bool:
    """True when the candidate dispatches every compute op the reference does."""
    return bool(reference_ops) and reference_ops <= candidate_ops
