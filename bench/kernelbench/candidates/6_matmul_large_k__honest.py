"""Honest: (M, K) x (K, N) with K much larger than M and N, split over K so the small
output still fills the GPU: each program multiplies one output tile over one K slice
(tiled fp32 tl.dot, input_precision='ieee'), writing a partial tile; a second kernel
adds the slices in a fixed order (deterministic, no atomics)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def partial_gemm_kernel(a_ptr, b_ptr, p_ptr, M, N, K, k_per_split, stride_am, stride_ak,
                        stride_bk, stride_bn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(2)
    k_start = split.to(tl.int64) * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None].to(tl.int64) * stride_am + (k_start + ks[None, :]) * stride_ak
    b_ptrs = b_ptr + (k_start + ks[:, None]) * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (k0 + ks[None, :] < k_end), other=0.0)
        b = tl.load(b_ptrs, mask=(k0 + ks[:, None] < k_end) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    p_ptrs = p_ptr + (split.to(tl.int64) * M + rows[:, None]) * N + cols[None, :]
    tl.store(p_ptrs, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def sum_splits_kernel(p_ptr, c_ptr, n_out, splits, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n_out
    total = tl.zeros([BLOCK], tl.float32)
    for s in range(0, splits):
        total += tl.load(p_ptr + s * n_out + idx, mask=ok, other=0.0)
    tl.store(c_ptr + idx, total.to(c_ptr.dtype.element_ty), mask=ok)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        M, K = A.shape
        N = B.shape[1]
        bm, bn, bk = 64, 64, 32
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        # about 512 programs in all, each slice a whole number of BLOCK_K steps
        splits = max(1, min(triton.cdiv(K, 4 * bk), triton.cdiv(512, tiles)))
        k_per_split = triton.cdiv(triton.cdiv(K, splits), bk) * bk
        splits = triton.cdiv(K, k_per_split)
        partial = torch.empty((splits, M, N), device=A.device, dtype=torch.float32)
        grid = (triton.cdiv(M, bm), triton.cdiv(N, bn), splits)
        partial_gemm_kernel[grid](A, B, partial, M, N, K, k_per_split, A.stride(0), A.stride(1),
                                  B.stride(0), B.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                  num_warps=4, num_stages=3)
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        block = 1024
        sum_splits_kernel[(triton.cdiv(M * N, block),)](partial, C, M * N, splits, BLOCK=block,
                                                        num_warps=4)
        return C
