"""Honest: C = A * s, one masked elementwise Triton kernel; s arrives as a Python float."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(a_ptr, c_ptr, s, n_elements, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offsets = start + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(c_ptr + offsets, (a * s).to(c_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        A = A.contiguous()
        C = torch.empty_like(A)
        n = A.numel()
        block = 4096
        scale_kernel[(triton.cdiv(n, block),)](A, C, float(s), n, BLOCK=block, num_warps=8)
        return C
