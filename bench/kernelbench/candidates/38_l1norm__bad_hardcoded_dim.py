"""Bad: shape-specialised. The row length 65535 of the task is baked into the
kernel (row stride and block), so any other size computes the wrong rows.
Correct at the task's own sizes; caught by shape variation (--vary-shapes)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

ROW = 65535  # the task's `dim`, hard-coded


@triton.jit
def l1_norm_kernel(x_ptr, y_ptr, n_elements, ROW: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, ROW, BLOCK):
        offs = row * ROW + start + cols
        mask = (start + cols < ROW) & (offs < n_elements)
        acc += tl.abs(tl.load(x_ptr + offs, mask=mask, other=0.0))
    mean = tl.sum(acc, axis=0) / ROW
    for start in range(0, ROW, BLOCK):
        offs = row * ROW + start + cols
        mask = (start + cols < ROW) & (offs < n_elements)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(y_ptr + offs, x / mean, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows = triton.cdiv(x.numel(), ROW)  # as many 65535-long rows as the data holds
        l1_norm_kernel[(rows,)](x, y, x.numel(), ROW=ROW, BLOCK=16384, num_warps=16)
        return y
