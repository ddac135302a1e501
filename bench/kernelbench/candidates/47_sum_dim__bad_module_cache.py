"""Bad: keeps results in a module-level dict keyed on the input's shape, so every
call after the first with that shape returns the first call's answer."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_RESULTS = {}


@triton.jit
def sum_dim_kernel(x_ptr, y_ptr, R, inner, BLOCK_I: tl.constexpr):
    o = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    ok = cols < inner
    acc = tl.zeros([BLOCK_I], tl.float32)
    for r in range(0, R):
        acc += tl.load(x_ptr + (o * R + r) * inner + cols, mask=ok, other=0.0)
    tl.store(y_ptr + o * inner + cols, acc, mask=ok)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (tuple(x.shape), self.dim)
        if key in _RESULTS:
            return _RESULTS[key]
        x = x.contiguous()
        outer, R, inner = x.shape[0], x.shape[1], x.shape[2]
        y = torch.empty((outer, 1, inner), device=x.device, dtype=x.dtype)
        sum_dim_kernel[(outer, triton.cdiv(inner, 128))](x, y, R, inner, BLOCK_I=128)
        _RESULTS[key] = y
        return y
