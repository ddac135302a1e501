"""Bad: the launch grid rounds down (n // BLOCK programs instead of cdiv), so the last
n % BLOCK outputs are never written. With the task's 32 x 64 x 513 x 513 outputs and
BLOCK = 4096, 2048 values at the end stay as the allocator left them."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def sub_tanh_kernel(y_ptr, conv_bias_ptr, bias_ptr, out_ptr, n_elements, C, HW,
                    BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    c = (offs // HW) % C
    v = tl.load(y_ptr + offs, mask=mask, other=0.0) + tl.load(conv_bias_ptr + c, mask=mask,
                                                               other=0.0)
    v = v - tl.load(bias_ptr + c, mask=mask, other=0.0)
    e = tl.exp(-2.0 * tl.abs(v))
    t = (1.0 - e) / (1.0 + e)
    tl.store(out_ptr + offs, tl.where(v >= 0, t, -t), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape, stride=2, padding=1,
                 output_padding=1):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size,
                                                 stride=stride, padding=padding,
                                                 output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        ct = self.conv_transpose
        y = F.conv_transpose2d(x, ct.weight, None, ct.stride, ct.padding, ct.output_padding,
                               ct.groups, ct.dilation)
        n, c, h, w = y.shape
        out = torch.empty_like(y)
        block = 4096
        grid = (y.numel() // block,)  # rounds down: the tail is never written
        sub_tanh_kernel[grid](y, ct.bias, self.bias, out, y.numel(), c, h * w, BLOCK=block,
                              num_warps=8)
        return out
