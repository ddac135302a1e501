"""Bad, but close: the mean divides by R - 1 instead of R (a Bessel-style slip).
At the task's R = 4096 every value is 2.4e-4 too large in relative terms."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_dim_kernel(x_ptr, y_ptr, R, inner, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    o = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    col_ok = cols < inner
    rr = tl.arange(0, BLOCK_R)
    acc = tl.zeros([BLOCK_R, BLOCK_I], tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + rr
        mask = (r < R)[:, None] & col_ok[None, :]
        acc += tl.load(x_ptr + o * R * inner + r[:, None] * inner + cols[None, :], mask=mask,
                       other=0.0)
    mean = tl.sum(acc, axis=0) / (R - 1)  # BUG (deliberate): should be R
    tl.store(y_ptr + o * inner + cols, mean, mask=col_ok)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        outer, R, inner = x.shape[0], x.shape[1], x.shape[2]
        y = torch.empty((outer, inner), device=x.device, dtype=x.dtype)
        grid = (outer, triton.cdiv(inner, 128))
        mean_dim_kernel[grid](x, y, R, inner, BLOCK_R=32, BLOCK_I=128, num_warps=4)
        return y
