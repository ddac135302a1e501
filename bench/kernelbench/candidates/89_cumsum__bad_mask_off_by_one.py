"""Bad: off-by-one in the store mask (`< n_cols - 1`): the last element of every
row is never written."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK)
    carry = tl.full([], 0.0, tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + lanes
        x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
        y = carry + tl.cumsum(x, axis=0)
        tl.store(y_ptr + row * n_cols + offs, y, mask=offs < n_cols - 1)  # BUG (deliberate)
        carry += tl.sum(x, axis=0)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        block = min(triton.next_power_of_2(n_cols), 4096)
        cumsum_kernel[(n_rows,)](x, y, n_cols, BLOCK=block, num_warps=8)
        return y
