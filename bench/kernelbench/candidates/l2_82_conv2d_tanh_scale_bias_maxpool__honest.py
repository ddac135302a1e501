"""Honest: Conv2d through cuDNN (F.conv2d, no bias), then one Triton kernel over the flat pooled
output: each output element takes the max over its K x K window of
tanh(conv + conv bias) * scale + bias[c] (MaxPool2d(K): stride K, no padding, floor)."""
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
def tanh_scale_bias_maxpool_kernel(y_ptr, conv_bias_ptr, bias_ptr, out_ptr, C, H, W, OH, OW,
                                   n_out, scale, K: tl.constexpr, BLOCK: tl.constexpr):
    # one lane per pooled output element, over the flat (N, C, OH, OW) output
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    ow = offs % OW
    oh = (offs // OW) % OH
    plane = offs // (OH * OW)
    c = plane % C
    cb = tl.load(conv_bias_ptr + c, mask=mask, other=0.0)
    b = tl.load(bias_ptr + c, mask=mask, other=0.0)
    src = y_ptr + plane * H * W
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    for kh in tl.static_range(K):
        for kw in tl.static_range(K):
            idx = (oh * K + kh) * W + ow * K + kw
            v = tl.load(src + idx, mask=mask, other=0.0) + cb
            best = tl.maximum(best, _tanh(v) * scale + b)
    tl.store(out_ptr + offs, best, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor, bias_shape,
                 pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scaling_factor = scaling_factor
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.pool_kernel_size = pool_kernel_size

    def forward(self, x):
        conv = self.conv
        y = F.conv2d(x, conv.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
        n, c, h, w = y.shape
        k = self.pool_kernel_size
        oh, ow = h // k, w // k
        out = torch.empty((n, c, oh, ow), device=y.device, dtype=y.dtype)
        n_out = out.numel()
        block = 1024
        grid = (triton.cdiv(n_out, block),)
        tanh_scale_bias_maxpool_kernel[grid](y, conv.bias, self.bias, out, c, h, w, oh, ow,
                                             n_out, float(self.scaling_factor), K=k,
                                             BLOCK=block, num_warps=4)
        return out
