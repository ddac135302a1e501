"""Honest: log-softmax along the module's dim: online max/sum in fp32, then x - max - log(sum)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        empty = m_new == float("-inf")
        s = s * tl.where(empty, 0.0, tl.exp(m - m_new)) + tl.where(empty, 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    row_sum = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - row_max)), axis=0)
    shift = row_max + tl.log(row_sum)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + start + cols, (x - shift).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        moved = x.movedim(self.dim, -1).contiguous()  # a no-op when dim is the last one
        n_cols = moved.shape[-1]
        rows = moved.view(-1, n_cols)
        y = torch.empty_like(rows)
        block = min(triton.next_power_of_2(n_cols), 4096)
        log_softmax_kernel[(rows.shape[0],)](rows, y, n_cols, rows.stride(0), y.stride(0),
                                             BLOCK=block, num_warps=8 if block >= 2048 else 4)
        return y.view(moved.shape).movedim(-1, self.dim)
