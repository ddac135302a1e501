"""A submodule's forward as a torch.library custom op that runs a kernel, guarded.

One op, `kernelevo_model::kernel(inputs, weights, slot)`, serves every swapped
submodule: `slot` names the swap. Weights travel as op inputs, so
torch.compile sees what the output depends on; the fake (meta) implementation
runs the original submodule's forward on fake tensors for shapes. At an input
signature (shapes, dtypes, device) the kernel was not verified for, the guard
runs the original forward instead and warns once.

The backward of a forward-only task is the original's (a vjp through its
forward, traced by torch.compile like any PyTorch code). That of a training
task (`backward = True`) is the kernel's own, through a second opaque op,
`kernelevo_model::kernel_backward`: it recomputes the kernel's forward under
grad on the saved inputs and weights and runs autograd through it, so the
kernel's autograd.Function backward runs. A custom op's output cannot carry
the kernel's autograd graph (what its forward saved) to the backward, hence
the recompute: one more kernel forward per backward. Where the guard ran the
original forward, the backward op runs the original's backward too.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.utils.stateless import _reparametrize_module

OP_NAME = "kernelevo_model::kernel"
Signature = tuple[tuple[tuple[int, ...], str, str], ...]


class KernelFallbackWarning(UserWarning):
    """A swapped submodule ran its original forward: the kernel was not verified there."""


@dataclass
class Swap:
    """One swapped submodule: its original, its kernel and where the kernel may run."""

    path: str
    original: torch.nn.Module
    kernel: torch.nn.Module
    names: tuple[str, ...]  # the original's parameters then buffers, as the op receives them
    kernel_names: tuple[str | None, ...]  # the kernel's name for each (None: unused)
    verified: set[Signature] = field(default_factory=set)
    guard: bool = True
    warned: set[Signature] = field(default_factory=set)
    training: bool = False  # the kernel's own backward (a training task), else the original's


_SWAPS: dict[int, Swap] = {}
_NEXT_SLOT = itertools.count()


def register(swap: Swap) -> int:
    """A slot number for `swap`, as the op's `slot` argument."""
    slot = next(_NEXT_SLOT)
    _SWAPS[slot] = swap
    return slot


def signature(inputs: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> Signature:
    return tuple((tuple(x.shape), str(x.dtype).removeprefix("torch."), x.device.type)
                 for x in inputs)


def module_tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Parameters then buffers, by name: the order weights are passed to the op."""
    return list(module.named_parameters()) + list(module.named_buffers())


def named_tensors(module: torch.nn.Module, names: tuple[str, ...]) -> list[torch.Tensor] | None:
    """The module's parameter or buffer at each dotted name; None if one is gone.

    What module_tensors gives at those names, without walking every submodule:
    on each call of a swapped forward that walk (twice) was about 40 % of the
    swap's own host time.
    """
    found: list[torch.Tensor] = []
    for name in names:
        owner_path, _, leaf = name.rpartition(".")
        owner = module
        for part in owner_path.split(".") if owner_path else ():
            owner = owner._modules.get(part)  # type: ignore[assignment]
            if owner is None:
                return None
        tensor: torch.Tensor | None = owner._parameters.get(leaf)
        if tensor is None:
            tensor = owner._buffers.get(leaf)
        if tensor is None:
            return None
        found.append(tensor)
    return found


@torch.library.custom_op(OP_NAME, mutates_args=())
def kernel_op(inputs: list[torch.Tensor], weights: list[torch.Tensor],
              slot: int) -> torch.Tensor:
    """The swapped forward: the kernel where verified, else the original, with a warning."""
    return run_swap(inputs, weights, slot)


def run_swap(inputs: list[torch.Tensor], weights: list[torch.Tensor], slot: int) -> torch.Tensor:
    """The op's body, also called directly where the op would add only its dispatch."""
    swap = _SWAPS[slot]
    seen = signature(inputs)
    if not runs_kernel(swap, inputs):
        if seen not in swap.warned:
            swap.warned.add(seen)
            warnings.warn(f"{swap.path}: the kernel was not verified for inputs {seen}; "
                          "running the original submodule there (verify that shape with "
                          "kernelevo.apply(..., shapes=...) to use the kernel)",
                          KernelFallbackWarning, stacklevel=2)
        out = original_forward(swap, inputs, weights)
    else:
        out = kernel_forward(swap, inputs, weights)
    return _fresh(out, inputs, weights)


@kernel_op.register_fake
def _kernel_op_fake(inputs: list[torch.Tensor], weights: list[torch.Tensor],
                    slot: int) -> torch.Tensor:
    out = original_forward(_SWAPS[slot], inputs, weights)
    return out.new_empty(out.shape)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    tensors, weights, slot = inputs
    ctx.save_for_backward(*tensors, *weights)
    ctx.count = len(tensors)
    ctx.slot = slot


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, Any, None]:
    swap = _SWAPS[ctx.slot]
    saved = ctx.saved_tensors
    tensors, weights = list(saved[:ctx.count]), list(saved[ctx.count:])
    if swap.training:
        found = iter(torch.ops.kernelevo_model.kernel_backward(grad, tensors, weights, ctx.slot))
        grads = [next(found) if t.is_floating_point() else None for t in saved]
        return grads[:ctx.count], grads[ctx.count:], None
    vjp = torch.func.vjp(lambda xs, ws: original_forward(swap, xs, ws), tensors, weights)[1]
    grad_inputs, grad_weights = vjp(grad)
    return list(grad_inputs), list(grad_weights), None


kernel_op.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op(OP_NAME + "_backward", mutates_args=())
def kernel_backward_op(grad: torch.Tensor, inputs: list[torch.Tensor],
                       weights: list[torch.Tensor], slot: int) -> list[torch.Tensor]:
    """Gradients of the floating inputs then weights: the kernel's backward where it ran."""
    swap = _SWAPS[slot]
    # The op runs below autograd (custom ops do); the recompute needs it back.
    excluded = torch._C._dispatch_tls_local_exclude_set()
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(),
                                         excluded - _AUTOGRAD_KEYS):
        found = gradients(swap, inputs, weights, grad, through_kernel=runs_kernel(swap, inputs))
    return [_fresh(g, [grad, *inputs], weights) for g in found]


@kernel_backward_op.register_fake
def _kernel_backward_fake(grad: torch.Tensor, inputs: list[torch.Tensor],
                          weights: list[torch.Tensor], slot: int) -> list[torch.Tensor]:
    return [t.new_empty(t.shape) for t in [*inputs, *weights] if t.is_floating_point()]


_AUTOGRAD_KEYS = (torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradFunctionality)
                  | torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradOther)
                  | torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradNestedTensor))


def gradients(swap: Swap, inputs: list[torch.Tensor], weights: list[torch.Tensor],
              grad: torch.Tensor, *, through_kernel: bool) -> list[torch.Tensor]:
    """The vjp of `grad` for each floating input then weight, through the kernel or the original.

    Zeros for a tensor the output does not depend on.
    """
    leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in [*inputs, *weights]]
    xs, ws = leaves[:len(inputs)], leaves[len(inputs):]
    wanted = [t for t in leaves if t.requires_grad]
    with torch.enable_grad():
        if through_kernel:
            out = kernel_forward(swap, xs, ws, reuse_own=False)
        else:
            out = original_forward(swap, xs, ws, reuse_own=False)
        found: tuple[torch.Tensor | None, ...] = (None,) * len(wanted)
        if wanted and out.requires_grad:
            found = torch.autograd.grad(out, wanted, grad, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g.detach() for t, g in zip(wanted, found)]


def runs_kernel(swap: Swap, inputs: list[torch.Tensor]) -> bool:
    """Whether the op runs the kernel at these inputs (else the guard runs the original)."""
    return not swap.guard or signature(inputs) in swap.verified


def original_forward(swap: Swap, inputs: list[torch.Tensor], weights: list[torch.Tensor],
                     reuse_own: bool = True) -> torch.Tensor:
    """The original class's forward with `weights` (the instance's own forward is the swap).

    `reuse_own=False`: `weights` are always swapped in, even tensors sharing the
    module's storage (detached leaves that gradients are taken of).
    """
    module = swap.original
    with _maybe_reparametrized(module, swap.names, weights, reuse_own):
        return type(module).forward(module, *inputs)


def kernel_forward(swap: Swap, inputs: list[torch.Tensor], weights: list[torch.Tensor],
                   reuse_own: bool = True) -> torch.Tensor:
    """The kernel module's forward with `weights` in place of its own (`reuse_own` as above)."""
    names = [n for n in swap.kernel_names if n is not None]
    used = [w for n, w in zip(swap.kernel_names, weights) if n is not None]
    with _maybe_reparametrized(swap.kernel, tuple(names), used, reuse_own):
        return swap.kernel(*inputs)


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _maybe_reparametrized(module: torch.nn.Module, names: tuple[str, ...],
                          weights: list[torch.Tensor], reuse_own: bool = True) -> Any:
    """Swap in `weights` unless they are the module's own (eager calls: no cost)."""
    own = named_tensors(module, names) if reuse_own else None
    if own is not None and all(_same(a, w) for a, w in zip(own, weights)):
        return _Nothing()
    return _reparametrize_module(module, dict(zip(names, weights)))


def _same(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    if a is b:
        return True
    plain = (torch.Tensor, torch.nn.Parameter)
    if a is None or type(a) not in plain or type(b) not in plain:
        return False  # fake and functional tensors (tracing) are never the module's own
    try:
        return (a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
                and a.stride() == b.stride() and a.data_ptr() == b.data_ptr())
    except RuntimeError:  # a tensor without storage
        return False


def _fresh(out: Any, inputs: list[torch.Tensor], weights: list[torch.Tensor]) -> torch.Tensor:
    """A contiguous output that aliases no input (a custom op may not return an alias)."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"a swapped forward returned {type(out).__name__}, not a tensor")
    out = out.contiguous()
    storages = {t.untyped_storage().data_ptr() for t in [*inputs, *weights] if t.numel()}
    if out.numel() and out.untyped_storage().data_ptr() in storages:
        out = out.clone()
    return out


def patched_forward(module: torch.nn.Module, slot: int, arity: int) -> Any:
    """A forward for the instance: tensors-only calls go through the op, others as before."""
    names = _SWAPS[slot].names

    def forward(*args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != arity or not all(isinstance(a, torch.Tensor) for a in args):
            return type(module).forward(module, *args, **kwargs)
        weights = named_tensors(module, names)
        if weights is None:  # a weight was removed since: as the module holds them now
            weights = [t for _, t in module_tensors(module)]
        tensors = [*args, *weights]
        if _eager(tensors):
            if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
                return _EagerSwap.apply(slot, len(args), *tensors)
            return run_swap(list(args), weights, slot)
        return torch.ops.kernelevo_model.kernel(list(args), weights, slot)
    return forward


def _eager(tensors: list[torch.Tensor]) -> bool:
    """Whether the op's body may run without the op: plain tensors, outside compile and transforms.

    The op is what torch.compile traces (no graph break); on an eager call
    its dispatch, and its autograd's, are only host time
    (bench/swap_overhead.py): the body runs directly, with the same autograd
    formula as a `torch.autograd.Function` where there is a graph to record.
    Tensor subclasses, functorch transforms and tracing keep the op.
    """
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return False
    return all(type(t) in _PLAIN for t in tensors)


_PLAIN = (torch.Tensor, torch.nn.Parameter)


class _EagerSwap(torch.autograd.Function):
    """The op's body and autograd formula (`_setup_context`, `_backward`) for an eager call."""

    @staticmethod
    def forward(ctx: Any, slot: int, count: int, *tensors: torch.Tensor) -> torch.Tensor:
        inputs, weights = list(tensors[:count]), list(tensors[count:])
        _setup_context(ctx, (inputs, weights, slot), None)
        return run_swap(inputs, weights, slot)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        grad_inputs, grad_weights, _ = _backward(ctx, grad)
        return (None, None, *grad_inputs, *grad_weights)
