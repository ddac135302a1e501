"""Honest: diag(A) @ B without building diag(A): each row of B scaled by A[row], 2-D tiles."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_scale_kernel(a_ptr, b_ptr, c_ptr, N, M, stride_bn, stride_bm, stride_cn,
                     BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < N
    mask = row_ok[:, None] & (cols[None, :] < M)
    scale = tl.load(a_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    rows64 = rows.to(tl.int64)
    b = tl.load(b_ptr + rows64[:, None] * stride_bn + cols[None, :] * stride_bm, mask=mask,
                other=0.0).to(tl.float32)
    c = scale[:, None] * b
    tl.store(c_ptr + rows64[:, None] * stride_cn + cols[None, :], c.to(c_ptr.dtype.element_ty),
             mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A = A.contiguous()
        N, M = B.shape
        C = torch.empty((N, M), device=B.device, dtype=B.dtype)
        block_n, block_m = 16, 256
        grid = (triton.cdiv(N, block_n), triton.cdiv(M, block_m))
        row_scale_kernel[grid](A, B, C, N, M, B.stride(0), B.stride(1), C.stride(0),
                               BLOCK_N=block_n, BLOCK_M=block_m, num_warps=4)
        return C
