"""The host time a swapped submodule's forward adds per call (kernelevo.model.swap).

    python bench/swap_overhead.py          # CPU or GPU; prints microseconds per call

A tiny two-linear module is swapped for an identical one the way
`kernelevo model apply` does it (shared weights, a verified signature, the
custom op), so the kernel's own work is negligible and the difference is
the swap's: the op's dispatch, the weights' lookup, the output's check.
An eager call with no autograd to record skips the op's dispatch; the last
figure calls the op itself, as compile and autograd do.
Medians of 7 loops of 3,000 calls, under no_grad and with grad.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn as nn

from kernelevo.model import swap as sw
from kernelevo.model.apply import share_weights


class _Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.proj = nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.qkv(x)[..., :8])


def _per_call_us(call, calls: int = 3000, loops: int = 7) -> float:
    for _ in range(200):
        call()
    samples = []
    for _ in range(loops):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    torch.manual_seed(0)
    patched, kernel = _Attn().eval(), _Attn().eval()
    names = tuple(name for name, _ in sw.module_tensors(patched))
    share_weights(patched, kernel, names)
    swap = sw.Swap("attn", patched, kernel, names, names)
    slot = sw.register(swap)
    x = torch.randn(2, 8)
    swap.verified.add(sw.signature([x]))
    patched.forward = sw.patched_forward(patched, slot, 1)  # type: ignore[method-assign]
    for mode, context in (("no_grad", torch.no_grad), ("grad", torch.enable_grad)):
        with context():
            alone = _per_call_us(lambda: kernel(x))
            through = _per_call_us(lambda: patched(x))
            weights = sw.named_tensors(patched, names)
            op = _per_call_us(lambda: torch.ops.kernelevo_model.kernel([x], weights, slot))
        print(f"{mode}: kernel module alone {alone:.1f} us, through the swap {through:.1f} us "
              f"(the swap's own {through - alone:.1f} us a call); always through the custom op "
              f"{op:.1f} us ({op - alone:.1f} us its own)")


if __name__ == "__main__":
    main()
