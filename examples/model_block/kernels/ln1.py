"""LayerNorm of the block (ln1 and ln2) as one Triton kernel: one program per row."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

from _model_block_4f8ca4ffe2 import build as build_model  # the model's copy beside the tasks


def reference_submodule() -> nn.Module:
    """The task's submodule, for its weights' shapes and its eps (as the task builds it)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(42)
        model = build_model()[0]
    return model.eval().get_submodule("ln1")


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = centered * rstd * w + b
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        ln = reference_submodule()
        self.weight = nn.Parameter(ln.weight.detach().clone())
        self.bias = nn.Parameter(ln.bias.detach().clone())
        self.eps = ln.eps

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        x = x0.contiguous()
        n_cols = x.shape[-1]
        y = torch.empty_like(x)
        rows = x.numel() // n_cols
        block = triton.next_power_of_2(n_cols)
        _layernorm_kernel[(rows,)](x, self.weight, self.bias, y, n_cols, self.eps, BLOCK=block,
                                   num_warps=4 if block <= 2048 else 8)
        return y
