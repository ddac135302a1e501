"""Honest: Conv2d through cuDNN (F.conv2d with the module's weight and bias), then one
Triton kernel: a 2-D tile of (channel block x pixels) per step, the min over channels of
conv * scale, written to the (N, 1, H, W) output."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def scale_channel_min_kernel(y_ptr, out_ptr, C, HW, scale, BLOCK_C: tl.constexpr,
                             BLOCK: tl.constexpr):
    image = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    pix_mask = offs < HW
    chans = tl.arange(0, BLOCK_C)
    base = image.to(tl.int64) * C * HW
    m = tl.full([BLOCK], float("inf"), tl.float32)
    for c0 in range(0, C, BLOCK_C):
        c = c0 + chans
        mask = (c < C)[:, None] & pix_mask[None, :]
        ptrs = y_ptr + base + c[:, None].to(tl.int64) * HW + offs[None, :]
        v = tl.load(ptrs, mask=mask, other=0.0) * scale
        # masked lanes become +inf after scaling (whatever the sign of scale): never the min
        v = tl.where(mask, v, float("inf"))
        m = tl.minimum(m, tl.min(v, axis=0))
    tl.store(out_ptr + image.to(tl.int64) * HW + offs, m, mask=pix_mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale_factor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scale_factor = scale_factor

    def forward(self, x):
        conv = self.conv
        y = F.conv2d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation,
                     conv.groups)
        n, c, h, w = y.shape
        out = torch.empty((n, 1, h, w), device=y.device, dtype=y.dtype)
        hw = h * w
        block = min(256, triton.next_power_of_2(hw))
        block_c = min(16, triton.next_power_of_2(c))
        grid = (n, triton.cdiv(hw, block))
        scale_channel_min_kernel[grid](y, out, c, hw, float(self.scale_factor), BLOCK_C=block_c,
                                       BLOCK=block, num_warps=4)
        return out
