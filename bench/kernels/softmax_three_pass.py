"""Softmax in three Triton passes (row max, row sum of exp, normalise): correct
but reads the input three times; the scripted LLM's first, slower proposal."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_max_kernel(x_ptr, max_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    best = tl.full((BLOCK,), float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
        best = tl.maximum(best, x.to(tl.float32))
    tl.store(max_ptr + row, tl.max(best, axis=0))


@triton.jit
def row_sum_kernel(x_ptr, max_ptr, sum_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    row_max = tl.load(max_ptr + row)
    total = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
        total += tl.exp(x.to(tl.float32) - row_max)
    tl.store(sum_ptr + row, tl.sum(total, axis=0))


@triton.jit
def normalise_kernel(x_ptr, max_ptr, sum_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    row_max = tl.load(max_ptr + row)
    row_sum = tl.load(sum_ptr + row)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        y = tl.exp(x.to(tl.float32) - row_max) / row_sum
        tl.store(y_ptr + row * stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        stats = torch.empty((2, rows), device=x.device, dtype=torch.float32)
        grid = (rows,)
        row_max_kernel[grid](x, stats[0], cols, x.stride(0), BLOCK=1024)
        row_sum_kernel[grid](x, stats[0], stats[1], cols, x.stride(0), BLOCK=1024)
        normalise_kernel[grid](x, stats[0], stats[1], y, cols, x.stride(0), BLOCK=1024)
        return y
