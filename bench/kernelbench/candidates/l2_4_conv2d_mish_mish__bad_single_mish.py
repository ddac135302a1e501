"""Bad: the epilogue skips a step. F.conv2d, then one Triton kernel that adds the conv bias
and applies Mish once, where the task applies it twice."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def bias_mish_kernel(y_ptr, bias_ptr, out_ptr, C, HW, BLOCK: tl.constexpr):
    plane = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HW
    base = plane.to(tl.int64) * HW
    x = tl.load(y_ptr + base + offs, mask=mask, other=0.0) + tl.load(bias_ptr + plane % C)
    e = tl.exp(-tl.abs(x))
    u = 1.0 + e
    d = u - 1.0
    log1p = tl.where(d == 0.0, e, tl.log(u) * (e / tl.where(d == 0.0, 1.0, d)))
    t = tl.exp(-2.0 * (tl.maximum(x, 0.0) + log1p))
    tl.store(out_ptr + base + offs, x * ((1.0 - t) / (1.0 + t)), mask=mask)  # one Mish only


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        conv = self.conv
        y = F.conv2d(x, conv.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
        n, c, h, w = y.shape
        out = torch.empty_like(y)
        hw = h * w
        block = min(2048, triton.next_power_of_2(hw))
        grid = (n * c, triton.cdiv(hw, block))
        bias_mish_kernel[grid](y, conv.bias, out, c, hw, BLOCK=block, num_warps=4)
        return out
