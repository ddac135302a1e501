"""Honest: MaxPool3d (cubic kernel, stride, padding, dilation, ceil_mode) over the flat
output: each program computes BLOCK outputs (plane, depth, row, column), neighbours along
the row contiguous; padded positions read as -inf and a NaN in a window wins, as in torch."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def maxpool3d_kernel(x_ptr, y_ptr, n_out, D, H, W, D_out, H_out, W_out, stride, padding,
                     dilation, KERNEL: tl.constexpr, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    out_ok = idx < n_out
    ow = idx % W_out
    oh = (idx // W_out) % H_out
    od = (idx // (W_out * H_out)) % D_out
    plane = idx // (W_out * H_out * D_out)
    x_plane = x_ptr + plane * D * H * W
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    for kd in tl.static_range(KERNEL):
        i_d = od * stride - padding + kd * dilation
        d_ok = out_ok & (i_d >= 0) & (i_d < D)
        for kh in tl.static_range(KERNEL):
            ih = oh * stride - padding + kh * dilation
            h_ok = d_ok & (ih >= 0) & (ih < H)
            for kw in tl.static_range(KERNEL):
                iw = ow * stride - padding + kw * dilation
                ok = h_ok & (iw >= 0) & (iw < W)
                x = tl.load(x_plane + (i_d * H + ih) * W + iw, mask=ok,
                            other=float("-inf")).to(tl.float32)
                # NaN propagates like torch's max pooling (x != x only for NaN)
                best = tl.where((x > best) | (x != x), x, best)
    tl.store(y_ptr + idx, best.to(y_ptr.dtype.element_ty), mask=out_ok)


def pooled_size(size: int, kernel: int, stride: int, padding: int, dilation: int,
                ceil_mode: bool) -> int:
    """torch's output length: floor (or ceil) division, the last window starting inside."""
    span = dilation * (kernel - 1) + 1
    numerator = size + 2 * padding - span
    out = (-(-numerator // stride) if ceil_mode else numerator // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int = None, padding: int = 0,
                 dilation: int = 1, return_indices: bool = False, ceil_mode: bool = False):
        super().__init__()
        if return_indices:
            raise ValueError("return_indices=True is not supported by this kernel; use False")
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.ceil_mode = ceil_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        D, H, W = x.shape[-3:]
        args = (self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)
        D_out, H_out, W_out = (pooled_size(s, *args) for s in (D, H, W))
        y = torch.empty(x.shape[:-3] + (D_out, H_out, W_out), device=x.device, dtype=x.dtype)
        n_out = y.numel()
        block = 4096
        maxpool3d_kernel[(triton.cdiv(n_out, block),)](
            x, y, n_out, D, H, W, D_out, H_out, W_out, self.stride, self.padding,
            self.dilation, KERNEL=self.kernel_size, BLOCK=block, num_warps=8)
        return y
