"""Which PyTorch operators a forward call dispatches, for the reference-reuse check."""

from __future__ import annotations

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


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def record_ops(call: Callable[[], Any]) -> tuple[Any, set[str]]:
    """Run `call` and return its result and the names of the compute ops it dispatched."""
    recorder = _Recorder()
    with recorder:
        result = call()
    return result, {name for name in recorder.names if name not in NON_COMPUTE_OPS}


def reference_reused(reference_ops: set[str], candidate_ops: set[str]) -> bool:
    """True when the candidate dispatches every compute op the reference does."""
    return bool(reference_ops) and reference_ops <= candidate_ops
