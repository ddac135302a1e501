"""Honest: the GEMM through cuBLAS (torch.mm with the bias-free Linear's weight), then one
Triton kernel over 2-D tiles: ReLU(y + bias)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(y_ptr, bias_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    cmask = cols < N
    mask = (rows < M)[:, None] & cmask[None, :]
    offs = rows[:, None].to(tl.int64) * N + cols[None, :]
    b = tl.load(bias_ptr + cols, mask=cmask, other=0.0)
    v = tl.load(y_ptr + offs, mask=mask, other=0.0) + b[None, :]
    tl.store(out_ptr + offs, tl.maximum(v, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        y = torch.mm(x, self.gemm.weight.t())
        m, n = y.shape
        out = torch.empty_like(y)
        bm, bn = 16, 256
        grid = (triton.cdiv(n, bn), triton.cdiv(m, bm))
        add_relu_kernel[grid](y, self.bias, out, m, n, BLOCK_M=bm, BLOCK_N=bn, num_warps=4)
        return out
