"""The attention's softmax over the last dimension: one program per row, held in registers."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf")).to(tl.float32)
    # Subtracting the row max keeps exp() from overflowing.
    num = tl.exp(x - tl.max(x, axis=0))
    y = num / tl.sum(num, axis=0)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        x = x0.contiguous()
        n_cols = x.shape[-1]
        y = torch.empty_like(x)
        block = triton.next_power_of_2(n_cols)
        _softmax_kernel[(x.numel() // n_cols,)](x, y, n_cols, BLOCK=block,
                                                 num_warps=4 if block <= 2048 else 8)
        return y
