"""Honest: x / ||x||_F in three kernels: per-span partial sums of squares (fp32),
one program that adds the partials and takes the square root, then an
elementwise scale. No atomics, so the result is deterministic."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def partial_sumsq_kernel(x_ptr, part_ptr, n_elements, SPAN: tl.constexpr, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * SPAN
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for off in range(0, SPAN, BLOCK):
        offsets = start + off + lanes
        x = tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0).to(tl.float32)
        acc += x * x
    tl.store(part_ptr + tl.program_id(0), tl.sum(acc, axis=0))


@triton.jit
def finish_norm_kernel(part_ptr, norm_ptr, n_parts, BLOCK: tl.constexpr):
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for off in range(0, n_parts, BLOCK):
        acc += tl.load(part_ptr + off + lanes, mask=off + lanes < n_parts, other=0.0)
    tl.store(norm_ptr, tl.sqrt(tl.sum(acc, axis=0)))


@triton.jit
def scale_kernel(x_ptr, y_ptr, norm_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = x / tl.load(norm_ptr)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n = x.numel()
        span, block = 65536, 4096
        n_parts = triton.cdiv(n, span)
        parts = torch.empty(n_parts, device=x.device, dtype=torch.float32)
        norm = torch.empty(1, device=x.device, dtype=torch.float32)
        partial_sumsq_kernel[(n_parts,)](x, parts, n, SPAN=span, BLOCK=block, num_warps=8)
        finish_norm_kernel[(1,)](parts, norm, n_parts, BLOCK=1024, num_warps=4)
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(n, block),)](x, y, norm, n, BLOCK=block, num_warps=8)
        return y
