"""A swapped forward finds its module's weights by name, as they are at each call."""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn

from kernelevo.model import swap as sw
from kernelevo.model.apply import share_weights


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
        self.out = nn.Linear(4, 4)
        self.out.weight = self.inner[0].weight  # tied: listed once
        self.register_buffer("shift", torch.full((4,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.inner(x)) + self.shift


def test_named_tensors_are_module_tensors_at_their_names() -> None:
    block = _Block()
    listed = sw.module_tensors(block)
    names = tuple(name for name, _ in listed)
    found = sw.named_tensors(block, names)
    assert found is not None and all(a is b for a, b in zip(found, [t for _, t in listed]))
    assert "out.weight" not in names  # the tied weight, once
    del block.inner[1].bias
    assert sw.named_tensors(block, names) is None


def _swapped(training: bool = False) -> tuple[_Block, _Block, torch.Tensor, int]:
    torch.manual_seed(0)
    block, kernel = _Block().eval(), _Block().eval()
    names = tuple(name for name, _ in sw.module_tensors(block))
    share_weights(block, kernel, names)
    swap = sw.Swap("block", block, kernel, names, names, training=training)
    slot = sw.register(swap)
    x = torch.randn(3, 4)
    swap.verified.add(sw.signature([x]))
    block.forward = sw.patched_forward(block, slot, 1)  # type: ignore[method-assign]
    return block, kernel, x, slot


def test_the_swapped_forward_uses_weights_replaced_after_the_swap() -> None:
    block, kernel, x, _ = _swapped()
    with torch.no_grad():
        before = block(x)
        assert torch.allclose(before, _Block.forward(kernel, x))
        # a new tensor in the original's place: the kernel runs with it, not its stale one
        block.shift = torch.full((4,), 2.0)
        after = block(x)
    assert torch.allclose(after - before, torch.full_like(before, 1.5))
    assert torch.equal(kernel.shift, torch.full((4,), 0.5))  # its own is left as it was


def _op_calls(call) -> tuple[torch.Tensor, int]:
    """`call()`'s result and how many times the swap's custom op was dispatched in it."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = call()
    return out, sum(1 for e in prof.events() if e.name == sw.OP_NAME)


def _gradients(call, block: _Block, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """`call(x)`'s output and the gradients of x then of the block's parameters."""
    block.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    out = call(x)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return out.detach(), [x.grad, *[p.grad for p in block.parameters()]]


def test_an_eager_call_skips_the_ops_dispatch_with_the_ops_gradients() -> None:
    for training in (False, True):  # the original's vjp; the kernel's own backward
        block, kernel, x, slot = _swapped(training)
        expected = _Block.forward(kernel, x).detach()
        with torch.no_grad():
            out, calls = _op_calls(lambda: block(x))
        assert calls == 0 and torch.allclose(out, expected)
        (out, direct), calls = _op_calls(lambda: _gradients(block, block, x))
        assert calls == 0 and torch.allclose(out, expected)
        names = tuple(name for name, _ in sw.module_tensors(block))
        through_op = _gradients(
            lambda t: torch.ops.kernelevo_model.kernel([t], sw.named_tensors(block, names), slot),
            block, x)[1]
        assert all(g is not None and g.abs().sum() > 0 for g in direct)
        assert all(torch.allclose(a, b) for a, b in zip(direct, through_op))


def test_an_unverified_shape_still_falls_back_on_the_direct_path() -> None:
    block, kernel, _, _ = _swapped()
    with torch.no_grad():
        kernel.inner[1].bias.add_(1.0)  # the kernel now differs from the original
        other = torch.randn(5, 4)  # not verified
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            out, calls = _op_calls(lambda: block(other))
        assert calls == 0
        assert any(issubclass(w.category, sw.KernelFallbackWarning) for w in seen)
        assert torch.allclose(out, _Block.forward(block, other))
        assert not torch.allclose(out, _Block.forward(kernel, other))
