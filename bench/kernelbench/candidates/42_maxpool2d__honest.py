"""Honest: MaxPool2d (square kernel, stride, padding, dilation) over the flat
output: each program computes BLOCK outputs (plane, row, column), neighbours
along the row contiguous; padded positions read as -inf."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def maxpool2d_kernel(x_ptr, y_ptr, n_out, H, W, H_out, W_out, stride, padding, dilation,
                     KERNEL: tl.constexpr, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    out_ok = idx < n_out
    ow = idx % W_out
    oh = (idx // W_out) % H_out
    plane = idx // (W_out * H_out)
    x_plane = x_ptr + plane * H * W
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    for kh in tl.static_range(KERNEL):
        ih = oh * stride - padding + kh * dilation
        h_ok = out_ok & (ih >= 0) & (ih < H)
        for kw in tl.static_range(KERNEL):
            iw = ow * stride - padding + kw * dilation
            ok = h_ok & (iw >= 0) & (iw < W)
            x = tl.load(x_plane + ih * W + iw, mask=ok, other=float("-inf"))
            best = tl.maximum(best, x.to(tl.float32))
    tl.store(y_ptr + idx, best.to(y_ptr.dtype.element_ty), mask=out_ok)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        H, W = x.shape[-2], x.shape[-1]
        span = self.dilation * (self.kernel_size - 1) + 1
        H_out = (H + 2 * self.padding - span) // self.stride + 1
        W_out = (W + 2 * self.padding - span) // self.stride + 1
        y = torch.empty(x.shape[:-2] + (H_out, W_out), device=x.device, dtype=x.dtype)
        n_out = y.numel()
        block = 4096
        maxpool2d_kernel[(triton.cdiv(n_out, block),)](x, y, n_out, H, W, H_out, W_out,
                                                        self.stride, self.padding, self.dilation,
                                                        KERNEL=self.kernel_size, BLOCK=block,
                                                        num_warps=8)
        return y
