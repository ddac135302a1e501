"""Honest: MaxPool1d (kernel, stride, padding, dilation) as a gather-max kernel
over the flat output: each program computes BLOCK outputs (row, position);
padded positions read as -inf, so they never win."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def maxpool1d_kernel(x_ptr, y_ptr, n_out, L, L_out, stride, padding, dilation,
                     KERNEL: tl.constexpr, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    out_ok = idx < n_out
    row = idx // L_out
    first = (idx % L_out) * stride - padding
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    for k in tl.static_range(KERNEL):
        pos = first + k * dilation
        ok = out_ok & (pos >= 0) & (pos < L)
        x = tl.load(x_ptr + row * L + pos, mask=ok, other=float("-inf")).to(tl.float32)
        best = tl.maximum(best, x)
    tl.store(y_ptr + idx, best.to(y_ptr.dtype.element_ty), mask=out_ok)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int = None, padding: int = 0, dilation: int = 1,
                 return_indices: bool = False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices  # the task uses False: values only

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        L = x.shape[-1]
        span = self.dilation * (self.kernel_size - 1) + 1
        L_out = (L + 2 * self.padding - span) // self.stride + 1
        y = torch.empty(x.shape[:-1] + (L_out,), device=x.device, dtype=x.dtype)
        n_out = y.numel()
        block = 1024
        maxpool1d_kernel[(triton.cdiv(n_out, block),)](x, y, n_out, L, L_out, self.stride,
                                                        self.padding, self.dilation,
                                                        KERNEL=self.kernel_size, BLOCK=block,
                                                        num_warps=4)
        return y
