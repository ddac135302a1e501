"""Honest: Conv2d through cuDNN (F.conv2d, no bias), then one Triton kernel per plane:
(conv + bias) * multiplier[c], LeakyReLU(0.01), exact GELU (erf)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def mul_leaky_gelu_kernel(y_ptr, conv_bias_ptr, mult_ptr, out_ptr, C, HW, slope,
                          BLOCK: tl.constexpr):
    plane = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HW
    c = plane % C
    base = plane.to(tl.int64) * HW
    cb = tl.load(conv_bias_ptr + c)
    m = tl.load(mult_ptr + c)
    v = (tl.load(y_ptr + base + offs, mask=mask, other=0.0) + cb) * m
    v = tl.where(v > 0, v, v * slope)
    v = 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476))
    tl.store(out_ptr + base + offs, v, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, multiplier_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))
        self.negative_slope = 0.01  # nn.LeakyReLU()'s default

    def forward(self, x):
        conv = self.conv
        y = F.conv2d(x, conv.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
        n, c, h, w = y.shape
        out = torch.empty_like(y)
        hw = h * w
        block = min(2048, triton.next_power_of_2(hw))
        grid = (n * c, triton.cdiv(hw, block))
        mul_leaky_gelu_kernel[grid](y, conv.bias, self.multiplier, out, c, hw,
                                    self.negative_slope, BLOCK=block, num_warps=4)
        return out
