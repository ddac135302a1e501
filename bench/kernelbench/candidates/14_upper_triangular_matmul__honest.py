"""Honest: C = triu(A @ B) for upper-triangular A and B, exploiting the structure.

With A and B upper triangular, C[i, j] = sum over k in [i, j] of A[i, k] B[k, j]
and C is upper triangular. Tiles entirely below the diagonal are written as
zeros without touching A or B; the other tiles only walk k from the tile's
first row to its last column, about a sixth of the work of a full GEMM.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def triu_matmul_kernel(a_ptr, b_ptr, c_ptr, N, stride_am, stride_ak, stride_bk, stride_bn,
                       stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    col_ok = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    row_start = pid_m * BLOCK_M
    col_end = tl.minimum((pid_n + 1) * BLOCK_N, N)
    # Below-diagonal tiles (first row past the last column) have an empty k range.
    if row_start < col_end:
        ks = tl.arange(0, BLOCK_K)
        for k0 in range(row_start, col_end, BLOCK_K):
            k = k0 + ks
            k_ok = k < N
            a = tl.load(a_ptr + rows[:, None].to(tl.int64) * stride_am + k[None, :] * stride_ak,
                        mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptr + k[:, None].to(tl.int64) * stride_bk + cols[None, :] * stride_bn,
                        mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            acc += tl.dot(a, b, input_precision="ieee")
        acc = tl.where(rows[:, None] <= cols[None, :], acc, 0.0)  # triu of the diagonal tiles
    c_ptrs = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        N = A.shape[0]
        C = torch.empty((N, N), device=A.device, dtype=A.dtype)
        block_m, block_n, block_k = 128, 128, 32
        grid = (triton.cdiv(N, block_m), triton.cdiv(N, block_n))
        triu_matmul_kernel[grid](A, B, C, N, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                                 C.stride(0), C.stride(1),
                                 BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                                 num_warps=8, num_stages=3)
        return C
