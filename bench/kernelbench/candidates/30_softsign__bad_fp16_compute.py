"""Bad: computes in fp16 inside the kernel for an fp32 task (half the bytes of
registers, 11-bit mantissa): errors around 5e-4 relative, beyond 1e-4."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softsign_fp16_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float16)
    one = tl.full([BLOCK], 1.0, tl.float16)
    y = x / (one + tl.abs(x))
    tl.store(y_ptr + offsets, y.to(tl.float32), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        softsign_fp16_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096, num_warps=8)
        return y
