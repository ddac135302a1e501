"""Bad: autotuned kernel whose grid ignores the chosen config. The grid assumes
1024 elements per program while every config processes fewer, so the tail of
the output is never written."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}, num_warps=2),
             triton.Config({"BLOCK": 512}, num_warps=4)],
    key=["n_elements"],
)
@triton.jit
def sigmoid_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(y_ptr + offsets, 1.0 / (1.0 + tl.exp(-x)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, 1024),)  # BUG (deliberate): not meta["BLOCK"]
        sigmoid_kernel[grid](x, y, n)
        return y
