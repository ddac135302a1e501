"""Bad: softmax without subtracting the row max. Fine on inputs in [0, 1), but
exp() overflows to inf (and inf / inf = NaN) once inputs exceed about 88."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_no_max_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * stride + start + cols, mask=mask, other=float("-inf"))
        acc += tl.exp(x)
    inv = 1.0 / tl.sum(acc, axis=0)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * stride + start + cols, mask=mask, other=float("-inf"))
        tl.store(y_ptr + row * stride + start + cols, tl.exp(x) * inv, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        block = min(triton.next_power_of_2(n_cols), 4096)
        softmax_no_max_kernel[(n_rows,)](x, y, n_cols, x.stride(0), BLOCK=block, num_warps=8)
        return y
