import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_sum_kernel(x_ptr, y_ptr, n_cols, stride_x, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    cols = tl.arange(0, BLOCK)
    # One fp32 partial sum per lane, reduced across lanes once at the end:
    # fewer cross-thread reductions, and each lane adds only n_cols / BLOCK
    # values, which keeps the rounding error small.
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        acc += tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0)
    tl.store(y_ptr + row, total.to(y_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty((n_rows,), dtype=x.dtype, device=x.device)
        # A chunk as long as the row, capped so registers don't spill on long rows.
        block = min(triton.next_power_of_2(n_cols), 4096)
        num_warps = 4 if block <= 1024 else 8
        _row_sum_kernel[(n_rows,)](x, y, n_cols, x.stride(0), BLOCK=block, num_warps=num_warps)
        return y
