"""Honest: Conv3d through cuDNN (F.conv3d, no bias), then one Triton kernel per
(image, channel) volume: + conv bias, LeakyReLU(0.2), + sum_tensor[c], clamp to [-1, 1],
exact GELU (erf)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def leaky_add_clamp_gelu_kernel(y_ptr, conv_bias_ptr, sum_ptr, out_ptr, C, DHW,
                                BLOCK: tl.constexpr):
    plane = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < DHW
    c = plane % C
    base = plane.to(tl.int64) * DHW
    cb = tl.load(conv_bias_ptr + c)
    s = tl.load(sum_ptr + c)
    v = tl.load(y_ptr + base + offs, mask=mask, other=0.0) + cb
    v = tl.where(v > 0, v, v * 0.2)
    v = tl.minimum(tl.maximum(v + s, -1.0), 1.0)
    v = 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476))
    tl.store(out_ptr + base + offs, v, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, sum_tensor_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.sum_tensor = nn.Parameter(torch.randn(sum_tensor_shape))

    def forward(self, x):
        conv = self.conv
        y = F.conv3d(x, conv.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
        n, c, d, h, w = y.shape
        out = torch.empty_like(y)
        dhw = d * h * w
        block = min(2048, triton.next_power_of_2(dhw))
        grid = (n * c, triton.cdiv(dhw, block))
        leaky_add_clamp_gelu_kernel[grid](y, conv.bias, self.sum_tensor, out, c, dhw,
                                          BLOCK=block, num_warps=4)
        return out
