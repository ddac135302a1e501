"""Honest: Conv2d through cuDNN (F.conv2d, no bias), then one Triton kernel over the flat pooled
output: each output element reads its K x K window of conv + bias, applies
tanh(x - s1) - s2 to each and averages (AvgPool2d(K): stride K, no padding, floor)."""
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
def sub_tanh_sub_avgpool_kernel(y_ptr, bias_ptr, out_ptr, C, H, W, OH, OW, n_out, sub1, sub2,
                                K: tl.constexpr, BLOCK: tl.constexpr):
    # one lane per pooled output element, over the flat (N, C, OH, OW) output
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    ow = offs % OW
    oh = (offs // OW) % OH
    plane = offs // (OH * OW)
    b = tl.load(bias_ptr + plane % C, mask=mask, other=0.0)
    src = y_ptr + plane * H * W
    acc = tl.zeros([BLOCK], tl.float32)
    for kh in tl.static_range(K):
        for kw in tl.static_range(K):
            idx = (oh * K + kh) * W + ow * K + kw
            v = tl.load(src + idx, mask=mask, other=0.0) + b
            acc += _tanh(v - sub1) - sub2
    tl.store(out_ptr + offs, acc / (K * K), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, subtract1_value, subtract2_value,
                 kernel_size_pool):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.subtract1_value = subtract1_value
        self.subtract2_value = subtract2_value
        self.kernel_size_pool = kernel_size_pool

    def forward(self, x):
        conv = self.conv
        y = F.conv2d(x, conv.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
        n, c, h, w = y.shape
        k = self.kernel_size_pool
        oh, ow = h // k, w // k
        out = torch.empty((n, c, oh, ow), device=y.device, dtype=y.dtype)
        n_out = out.numel()
        block = 1024
        grid = (triton.cdiv(n_out, block),)
        sub_tanh_sub_avgpool_kernel[grid](y, conv.bias, out, c, h, w, oh, ow, n_out,
                                          float(self.subtract1_value),
                                          float(self.subtract2_value), K=k, BLOCK=block,
                                          num_warps=4)
        return out
