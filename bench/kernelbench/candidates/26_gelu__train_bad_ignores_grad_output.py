"""Bad (wrong backward): exact GELU in an autograd.Function with its own Triton forward and
backward, but the backward writes GELU'(x) = Phi(x) + x * phi(x) alone: it never reads
grad_output, as if the loss were out.sum() (a gradient of ones)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def gelu_fwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    cdf = 0.5 * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, (x * cdf).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gelu_grad_kernel(x_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    cdf = 0.5 * (1.0 + tl.erf(x * 0.7071067811865476))
    pdf = tl.exp(-0.5 * x * x) * 0.3989422804014327
    tl.store(dx_ptr + offs, (cdf + x * pdf).to(dx_ptr.dtype.element_ty), mask=mask)


class _GELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        gelu_fwd_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps=8)
        ctx.save_for_backward(x)
        return y

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        dx = torch.empty_like(x)
        n = x.numel()
        gelu_grad_kernel[(triton.cdiv(n, BLOCK),)](x, dx, n, BLOCK=BLOCK, num_warps=8)
        return dx


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _GELU.apply(x)
