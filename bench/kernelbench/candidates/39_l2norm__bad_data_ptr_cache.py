"""Bad: caches its result keyed on the input's data_ptr() and shape, so a later
call with new values in the same buffer gets the old answer."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l2_norm_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * n_cols + start + cols, mask=mask, other=0.0)
        acc += x * x
    norm = tl.sqrt(tl.sum(acc, axis=0))
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * n_cols + start + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * n_cols + start + cols, x / norm, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (x.data_ptr(), tuple(x.shape))
        if key in self.cache:
            return self.cache[key]
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        block = min(triton.next_power_of_2(n_cols), 4096)
        l2_norm_kernel[(n_rows,)](x, y, n_cols, BLOCK=block, num_warps=8)
        self.cache[key] = y
        return y
