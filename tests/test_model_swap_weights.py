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


def _swapped() -> tuple[_Block, _Block, torch.Tensor]:
    torch.manual_seed(0)
    block, kernel = _Block().eval(), _Block().eval()
    names = tuple(name for name, _ in sw.module_tensors(block))
    share_weights(block, kernel, names)
    swap = sw.Swap("block", block, kernel, names, names)
    slot = sw.register(swap)
    x = torch.randn(3, 4)
    swap.verified.add(sw.signature([x]))
    block.forward = sw.patched_forward(block, slot, 1)  # type: ignore[method-assign]
    return block, kernel, x


def test_the_swapped_forward_uses_weights_replaced_after_the_swap() -> None:
    block, kernel, x = _swapped()
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


def test_an_eager_call_without_autograd_skips_the_ops_dispatch() -> None:
    block, kernel, x = _swapped()
    expected = _Block.forward(kernel, x).detach()
    with torch.no_grad():
        out, calls = _op_calls(lambda: block(x))
    assert calls == 0 and torch.allclose(out, expected)
    # autograd to record: through the op, whose backward gives the weights' gradients
    out, calls = _op_calls(lambda: block(x))
    assert calls == 1 and torch.allclose(out.detach(), expected)
    out.sum().backward()
    assert block.inner[0].weight.grad is not None
    # inputs that need grad while the weights do not: still the op
    for p in block.parameters():
        p.requires_grad_(False)
    x_grad = x.clone().requires_grad_(True)
    out, calls = _op_calls(lambda: block(x_grad))
    assert calls == 1
    out.sum().backward()
    assert x_grad.grad is not None and x_grad.grad.abs().sum() > 0


def test_an_unverified_shape_still_falls_back_on_the_direct_path() -> None:
    block, kernel, _ = _swapped()
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
