"""Honest: AvgPool1d (count_include_pad=True, as nn.AvgPool1d defaults) over the
flat output: each program sums the windows of BLOCK outputs (row, position) in
fp32, zero padding, then divides by the kernel size."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def avgpool1d_kernel(x_ptr, y_ptr, n_out, L, L_out, stride, padding,
                     KERNEL: tl.constexpr, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    out_ok = idx < n_out
    row = idx // L_out
    first = (idx % L_out) * stride - padding
    acc = tl.zeros([BLOCK], tl.float32)
    for k in tl.static_range(KERNEL):
        pos = first + k
        ok = out_ok & (pos >= 0) & (pos < L)
        acc += tl.load(x_ptr + row * L + pos, mask=ok, other=0.0).to(tl.float32)
    # Without ceil_mode every window ends inside the padded input, so with
    # padding counted the divisor is always the kernel size.
    y = acc / KERNEL
    tl.store(y_ptr + idx, y.to(y_ptr.dtype.element_ty), mask=out_ok)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int = 1, padding: int = 0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        L = x.shape[-1]
        L_out = (L + 2 * self.padding - self.kernel_size) // self.stride + 1
        y = torch.empty(x.shape[:-1] + (L_out,), device=x.device, dtype=x.dtype)
        n_out = y.numel()
        block = 1024
        avgpool1d_kernel[(triton.cdiv(n_out, block),)](x, y, n_out, L, L_out, self.stride,
                                                        self.padding, KERNEL=self.kernel_size,
                                                        BLOCK=block, num_warps=4)
        return y
