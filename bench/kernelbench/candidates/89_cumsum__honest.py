"""Honest: inclusive cumulative sum along the module's dim.

One program per row (the scanned dimension moved last: a no-op when it already
is, as for dim = 1 of the task's 2-D input): the row streams through BLOCK-wide chunks, each scanned
with tl.cumsum and offset by a running carry held in fp32.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl



@triton.jit
def cumsum_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    lanes = tl.arange(0, BLOCK)
    carry = tl.full([], 0.0, tl.float32)
    n_chunks = tl.cdiv(n_cols, BLOCK)
    for i in range(0, n_chunks):
        start = i * BLOCK
        offs = start + lanes
        mask = offs < n_cols
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        y = carry + tl.cumsum(x, axis=0)
        tl.store(y_ptr + base + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=0)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        moved = x.movedim(self.dim, -1).contiguous()
        n_cols = moved.shape[-1]
        y = torch.empty_like(moved)
        block = min(triton.next_power_of_2(n_cols), 4096)
        n_rows = moved.numel() // n_cols if n_cols else 0
        cumsum_kernel[(n_rows,)](moved, y, n_cols, BLOCK=block, num_warps=8 if block >= 2048 else 4)
        return y.movedim(-1, self.dim)
