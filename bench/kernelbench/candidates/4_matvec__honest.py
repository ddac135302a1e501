"""Honest: matrix-vector product, one program per output row streaming A in fp32 lanes."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matvec_kernel(a_ptr, b_ptr, c_ptr, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.program_id(1).to(tl.int64)  # columns of B (1 for a vector)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_K], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = (k0 + ks).to(tl.int64)
        mask = k < K
        a = tl.load(a_ptr + row * stride_am + k * stride_ak, mask=mask, other=0.0)
        b = tl.load(b_ptr + k * stride_bk + col * stride_bn, mask=mask, other=0.0)
        acc += a.to(tl.float32) * b.to(tl.float32)
    total = tl.sum(acc, axis=0)
    tl.store(c_ptr + row * stride_cm + col * stride_cn, total.to(c_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        block_k = min(4096, triton.next_power_of_2(K))
        matvec_kernel[(M, N)](A, B, C, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                              C.stride(0), C.stride(1), BLOCK_K=block_k, num_warps=8)
        return C
