"""Honest: Conv2d through cuDNN (F.conv2d, no bias), then one Triton kernel per plane:
min(conv + conv bias, constant) + bias, * scaling factor."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def min_add_mul_kernel(y_ptr, conv_bias_ptr, bias_ptr, out_ptr, C, HW, constant, scale,
                       BLOCK: tl.constexpr):
    plane = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HW
    c = plane % C
    base = plane.to(tl.int64) * HW
    cb = tl.load(conv_bias_ptr + c)
    b = tl.load(bias_ptr + c)
    v = tl.load(y_ptr + base + offs, mask=mask, other=0.0) + cb
    v = (tl.minimum(v, constant) + b) * scale
    tl.store(out_ptr + base + offs, v, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, constant_value, bias_shape,
                 scaling_factor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.constant_value = constant_value
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        conv = self.conv
        y = F.conv2d(x, conv.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
        n, c, h, w = y.shape
        out = torch.empty_like(y)
        hw = h * w
        block = min(2048, triton.next_power_of_2(hw))
        grid = (n * c, triton.cdiv(hw, block))
        min_add_mul_kernel[grid](y, conv.bias, self.bias, out, c, hw, float(self.constant_value),
                                 float(self.scaling_factor), BLOCK=block, num_warps=4)
        return out
