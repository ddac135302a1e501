"""Bad: writes Softplus into the input buffer and returns the input (saves an
allocation, destroys the caller's tensor)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softplus_inplace_kernel(x_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.where(x > 20.0, x, tl.maximum(x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(x))))
    tl.store(x_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        softplus_inplace_kernel[(triton.cdiv(n, 4096),)](x, n, BLOCK=4096, num_warps=8)
        return x
