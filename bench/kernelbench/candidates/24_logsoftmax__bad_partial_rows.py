"""Bad: partial kernel. The grid covers only the first half of the rows; the
rest of the output is whatever torch.empty handed back."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * stride_x + start + cols, mask=mask, other=float("-inf"))
        m_new = tl.maximum(m, x)
        empty = m_new == float("-inf")
        s = s * tl.where(empty, 0.0, tl.exp(m - m_new)) + tl.where(empty, 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    shift = row_max + tl.log(tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - row_max)),
                                    axis=0))
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * stride_x + start + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * stride_y + start + cols, x - shift, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        block = min(triton.next_power_of_2(n_cols), 4096)
        # BUG (deliberate): half the rows are never computed.
        log_softmax_kernel[(n_rows // 2,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=block)
        return y
