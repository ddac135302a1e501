"""A swapped forward finds its module's weights by name, as they are at each call."""

from __future__ import annotations

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
