"""Honest: tiled fp32 GEMM for irregular (M, K, N): every tile edge masked."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn,
                  stride_cb, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    # Any strides: a transposed operand is the same kernel with its strides swapped.
    # Grouped tile order: consecutive programs share panels of A, which stay in L2.
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    group_size = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_size
    pid_n = (pid % per_group) // group_size

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    a_ptrs = (a_ptr + batch * stride_ab + rows[:, None].to(tl.int64) * stride_am
              + ks[None, :].to(tl.int64) * stride_ak)
    b_ptrs = (b_ptr + batch * stride_bb + ks[:, None].to(tl.int64) * stride_bk
              + cols[None, :].to(tl.int64) * stride_bn)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        # fp32 products in fp32: the default TF32 would miss the 1e-4 tolerance.
        acc += tl.dot(a, b, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = (c_ptr + batch * stride_cb + rows[:, None].to(tl.int64) * stride_cm
              + cols[None, :].to(tl.int64) * stride_cn)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def _matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """c[i] = a[i] @ b[i] for 3-D views (batch, rows, cols) with any strides."""
    batch, M, K = a.shape
    N = b.shape[2]
    block_m, block_n, block_k = 128, 128, 32
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n), batch)
    matmul_kernel[grid](a, b, c, M, N, K,
                        a.stride(0), a.stride(1), a.stride(2),
                        b.stride(0), b.stride(1), b.stride(2),
                        c.stride(0), c.stride(1), c.stride(2),
                        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
                        num_warps=8, num_stages=3)
    return c


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        a = A  # a view, no copy
        b = B
        M, N = a.shape[0], b.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        _matmul(a.unsqueeze(0), b.unsqueeze(0), C.unsqueeze(0))
        return C
