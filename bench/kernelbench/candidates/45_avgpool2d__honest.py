"""Honest: AvgPool2d (stride defaults to the kernel size, zero padding counted)
over the flat output: each program averages the windows of BLOCK outputs
(plane, row, column), summing in fp32."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def avgpool2d_kernel(x_ptr, y_ptr, n_out, H, W, H_out, W_out, stride, padding,
                     KERNEL: tl.constexpr, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    out_ok = idx < n_out
    ow = idx % W_out
    oh = (idx // W_out) % H_out
    plane = idx // (W_out * H_out)
    x_plane = x_ptr + plane * H * W
    acc = tl.zeros([BLOCK], tl.float32)
    for kh in range(0, KERNEL):
        ih = oh * stride - padding + kh
        h_ok = out_ok & (ih >= 0) & (ih < H)
        for kw in tl.static_range(KERNEL):
            iw = ow * stride - padding + kw
            ok = h_ok & (iw >= 0) & (iw < W)
            acc += tl.load(x_plane + ih * W + iw, mask=ok, other=0.0).to(tl.float32)
    # Without ceil_mode every window lies inside the padded input: divisor k * k.
    y = acc / (KERNEL * KERNEL)
    tl.store(y_ptr + idx, y.to(y_ptr.dtype.element_ty), mask=out_ok)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int = None, padding: int = 0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        H, W = x.shape[-2], x.shape[-1]
        H_out = (H + 2 * self.padding - self.kernel_size) // self.stride + 1
        W_out = (W + 2 * self.padding - self.kernel_size) // self.stride + 1
        y = torch.empty(x.shape[:-2] + (H_out, W_out), device=x.device, dtype=x.dtype)
        n_out = y.numel()
        block = 1024
        avgpool2d_kernel[(triton.cdiv(n_out, block),)](x, y, n_out, H, W, H_out, W_out,
                                                        self.stride, self.padding,
                                                        KERNEL=self.kernel_size, BLOCK=block,
                                                        num_warps=4)
        return y
