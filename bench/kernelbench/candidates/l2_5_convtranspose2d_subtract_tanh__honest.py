"""Honest: ConvTranspose2d through cuDNN (F.conv_transpose2d, no bias), then one Triton
kernel per plane: + conv bias, - bias, tanh (through exp(-2|x|), overflow-free)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def sub_tanh_kernel(y_ptr, conv_bias_ptr, bias_ptr, out_ptr, C, HW, BLOCK: tl.constexpr):
    plane = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HW
    c = plane % C
    base = plane.to(tl.int64) * HW
    cb = tl.load(conv_bias_ptr + c)
    b = tl.load(bias_ptr + c)
    v = tl.load(y_ptr + base + offs, mask=mask, other=0.0) + cb
    tl.store(out_ptr + base + offs, _tanh(v - b), mask=mask)


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
        hw = h * w
        block = min(2048, triton.next_power_of_2(hw))
        grid = (n * c, triton.cdiv(hw, block))
        sub_tanh_kernel[grid](y, ct.bias, self.bias, out, c, hw, BLOCK=block, num_warps=4)
        return out
