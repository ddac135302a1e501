"""Honest: depthwise Conv2d, asymmetric input, square kernel, out_channels a multiple of in_channels.

The layer is built as the task builds it (same arguments, so the same seeded
weights); the convolution itself runs in one Triton kernel: each program computes
BLOCK outputs of the flat (image, channel, row, column) index, taps unrolled,
fp32 accumulation, zero padding by masks."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def depthwise_conv2d_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_out, C_in, H, W, C_out, H_out, W_out,
                            stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, multiplier,
                            KH: tl.constexpr, KW: tl.constexpr, HAS_BIAS: tl.constexpr,
                            BLOCK: tl.constexpr):
    """BLOCK outputs of the flat (n, c_out, oh, ow) index; c_out reads input channel
    c_out // multiplier (groups == C_in), taps out of the image read as zero padding."""
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    out_ok = idx < n_out
    ow = idx % W_out
    oh = (idx // W_out) % H_out
    co = (idx // (W_out * H_out)) % C_out
    n = idx // (W_out * H_out * C_out)
    x_plane = x_ptr + (n * C_in + co // multiplier) * H * W
    w_base = w_ptr + co * (KH * KW)
    acc = tl.zeros([BLOCK], tl.float32)
    for kh in tl.static_range(KH):
        ih = oh * stride_h - pad_h + kh * dil_h
        h_ok = out_ok & (ih >= 0) & (ih < H)
        for kw in tl.static_range(KW):
            iw = ow * stride_w - pad_w + kw * dil_w
            ok = h_ok & (iw >= 0) & (iw < W)
            x = tl.load(x_plane + ih * W + iw, mask=ok, other=0.0).to(tl.float32)
            w = tl.load(w_base + kh * KW + kw, mask=out_ok, other=0.0).to(tl.float32)
            acc += x * w
    if HAS_BIAS:
        acc += tl.load(b_ptr + co, mask=out_ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + idx, acc.to(y_ptr.dtype.element_ty), mask=out_ok)


def depthwise_conv2d(x: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    """conv(x) for a depthwise nn.Conv2d (groups == in_channels), computed by the kernel."""
    x = x.contiguous()
    weight = conv.weight.contiguous()
    N, C_in, H, W = x.shape
    C_out = weight.shape[0]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (conv.kernel_size, conv.stride, conv.padding,
                                              conv.dilation)
    H_out = (H + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    W_out = (W + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    y = torch.empty((N, C_out, H_out, W_out), device=x.device, dtype=x.dtype)
    n_out = y.numel()
    bias = conv.bias if conv.bias is not None else weight  # not read without a bias
    block = 1024
    depthwise_conv2d_kernel[(triton.cdiv(n_out, block),)](
        x, weight, bias, y, n_out, C_in, H, W, C_out, H_out, W_out, sh, sw, ph, pw, dh, dw,
        C_out // C_in, KH=kh, KW=kw, HAS_BIAS=conv.bias is not None, BLOCK=block, num_warps=4)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, bias: bool = False):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size=(kernel_size, kernel_size),
                                stride=stride, padding=padding, groups=in_channels, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return depthwise_conv2d(x, self.conv2d)
