"""Bad: shape-specialised. A flat kernel finds each element's channel as
(offset // PLANE) % C with the plane size 254 x 254 of the task's own output baked in as a
constexpr: at any other height or width the per-channel bias and multiplier go to the wrong
elements. Correct at the task's own sizes; caught by shape variation (--vary-shapes)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

PLANE = 254 * 254  # the task's conv output plane (256 - 3 + 1)^2, hard-coded


@triton.jit
def mul_leaky_gelu_kernel(y_ptr, conv_bias_ptr, mult_ptr, out_ptr, n_elements, C, slope,
                          PLANE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    c = (offs // PLANE) % C
    cb = tl.load(conv_bias_ptr + c, mask=mask, other=0.0)
    m = tl.load(mult_ptr + c, mask=mask, other=0.0)
    v = (tl.load(y_ptr + offs, mask=mask, other=0.0) + cb) * m
    v = tl.where(v > 0, v, v * slope)
    v = 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476))
    tl.store(out_ptr + offs, v, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, multiplier_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))

    def forward(self, x):
        conv = self.conv
        y = F.conv2d(x, conv.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
        out = torch.empty_like(y)
        n = y.numel()
        block = 2048
        mul_leaky_gelu_kernel[(triton.cdiv(n, block),)](y, conv.bias, self.multiplier, out, n,
                                                         y.shape[1], 0.01, PLANE=PLANE,
                                                         BLOCK=block, num_warps=8)
        return out
