"""Honest (forward and backward): softmax over dim 1 of a 2-D input in an
autograd.Function, one Triton program per row, looping over the row in chunks so rows of
any length fit. Forward: a running max and rescaled sum of exponentials in one pass, then
y = exp(x - max) / sum. Backward (from the saved y): dx = y * (dy - sum(dy * y)), the
row's dot product in a first pass, dx in a second."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_fwd_kernel(x_ptr, y_ptr, n_cols, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    cols = tl.arange(0, CHUNK)
    # per lane: the largest value seen and the sum of exp(x - that max)
    m = tl.full([CHUNK], float("-inf"), tl.float32)
    s = tl.zeros([CHUNK], tl.float32)
    for start in range(0, n_cols, CHUNK):
        offs = start + cols
        x = tl.load(x_ptr + base + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # lanes still at -inf (nothing loaded yet) add nothing and must not give nan
        scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
        s = s * scale + tl.where(x == float("-inf"), 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - row_max)), axis=0)
    inv = 1.0 / total
    for start in range(0, n_cols, CHUNK):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + offs, (tl.exp(x - row_max) * inv).to(y_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def softmax_bwd_kernel(dy_ptr, y_ptr, dx_ptr, n_cols, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    cols = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], tl.float32)
    for start in range(0, n_cols, CHUNK):
        offs = start + cols
        mask = offs < n_cols
        y = tl.load(y_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        acc += y * dy
    dot = tl.sum(acc, axis=0)
    for start in range(0, n_cols, CHUNK):
        offs = start + cols
        mask = offs < n_cols
        y = tl.load(y_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + base + offs, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


def _chunk(n_cols: int) -> int:
    return min(4096, triton.next_power_of_2(n_cols))


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        softmax_fwd_kernel[(n_rows,)](x, y, n_cols, CHUNK=_chunk(n_cols), num_warps=8)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        dy = dy.contiguous()
        n_rows, n_cols = y.shape
        dx = torch.empty_like(y)
        softmax_bwd_kernel[(n_rows,)](dy, y, dx, n_cols, CHUNK=_chunk(n_cols), num_warps=8)
        return dx


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Softmax.apply(x)
