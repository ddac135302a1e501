"""Bad: try/except around the kernel that falls back to torch.tanh when it fails."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tanh_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    tl.store(y_ptr + offsets, tl.where(x >= 0, t, -t), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            x = x.contiguous()
            y = torch.empty_like(x)
            n = x.numel()
            tanh_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
            return y
        except Exception:
            return torch.tanh(x)
