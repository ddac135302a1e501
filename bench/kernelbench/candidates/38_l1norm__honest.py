"""Honest: L1 normalisation over dim 1: x / mean(|x|).

The input is viewed as (outer, R, inner) around dim 1; each program owns
BLOCK_I neighbouring inner positions of one outer index: a first pass over R
accumulates the statistic in fp32, a second pass writes x divided by it.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l1_norm_kernel(x_ptr, y_ptr, R, inner, n_ib, eps, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    pid = tl.program_id(0)
    o = (pid // n_ib).to(tl.int64)
    cols = (pid % n_ib) * BLOCK_I + tl.arange(0, BLOCK_I)
    col_ok = cols < inner
    rr = tl.arange(0, BLOCK_R)
    base = o * R * inner
    acc = tl.zeros([BLOCK_R, BLOCK_I], tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + rr
        mask = (r < R)[:, None] & col_ok[None, :]
        offsets = base + r[:, None].to(tl.int64) * inner + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        acc += tl.abs(x)
    total = tl.sum(acc, axis=0)
    denom = total / R
    for r0 in range(0, R, BLOCK_R):
        r = r0 + rr
        mask = (r < R)[:, None] & col_ok[None, :]
        offsets = base + r[:, None].to(tl.int64) * inner + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + offsets, (x / denom[None, :]).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        R = x.shape[1]
        outer = x.shape[0]
        inner = 1
        for size in x.shape[2:]:
            inner *= size
        y = torch.empty_like(x)
        block_i = min(64, triton.next_power_of_2(inner))
        block_r = min(max(4096 // block_i, 1), triton.next_power_of_2(R))
        n_ib = triton.cdiv(inner, block_i)
        grid = (outer * n_ib,)
        l1_norm_kernel[grid](x, y, R, inner, n_ib, 0.0, BLOCK_R=block_r, BLOCK_I=block_i,
                             num_warps=8)
        return y
