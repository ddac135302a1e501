"""Honest: AvgPool3d (cubic kernel, stride, padding; count_include_pad, no ceil_mode, as
nn.AvgPool3d's defaults) over the flat output: each program computes BLOCK outputs, the
window's in-bounds values summed in fp32 and divided by kernel^3 (padding counts as zeros)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def avgpool3d_kernel(x_ptr, y_ptr, n_out, D, H, W, D_out, H_out, W_out, stride, padding,
                     KERNEL: tl.constexpr, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    out_ok = idx < n_out
    ow = idx % W_out
    oh = (idx // W_out) % H_out
    od = (idx // (W_out * H_out)) % D_out
    plane = idx // (W_out * H_out * D_out)
    x_plane = x_ptr + plane * D * H * W
    total = tl.zeros([BLOCK], tl.float32)
    for kd in tl.static_range(KERNEL):
        i_d = od * stride - padding + kd
        d_ok = out_ok & (i_d >= 0) & (i_d < D)
        for kh in tl.static_range(KERNEL):
            ih = oh * stride - padding + kh
            h_ok = d_ok & (ih >= 0) & (ih < H)
            for kw in tl.static_range(KERNEL):
                iw = ow * stride - padding + kw
                ok = h_ok & (iw >= 0) & (iw < W)
                total += tl.load(x_plane + (i_d * H + ih) * W + iw, mask=ok,
                                 other=0.0).to(tl.float32)
    y = total / (KERNEL * KERNEL * KERNEL)
    tl.store(y_ptr + idx, y.to(y_ptr.dtype.element_ty), mask=out_ok)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int = None, padding: int = 0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        D, H, W = x.shape[-3:]
        k, s, p = self.kernel_size, self.stride, self.padding
        D_out, H_out, W_out = ((size + 2 * p - k) // s + 1 for size in (D, H, W))
        y = torch.empty(x.shape[:-3] + (D_out, H_out, W_out), device=x.device, dtype=x.dtype)
        n_out = y.numel()
        block = 4096
        avgpool3d_kernel[(triton.cdiv(n_out, block),)](
            x, y, n_out, D, H, W, D_out, H_out, W_out, s, p,
            KERNEL=k, BLOCK=block, num_warps=8)
        return y
