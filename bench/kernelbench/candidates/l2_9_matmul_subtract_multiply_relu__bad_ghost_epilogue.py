"""Bad: ghost kernel. The output comes from the reference's own PyTorch ops (F.linear,
subtract, multiply, ReLU); a Triton kernel copies it into a scratch buffer nobody reads."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask, other=0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x):
        y = F.linear(x, self.linear.weight, self.linear.bias)
        out = torch.relu((y - self.subtract_value) * self.multiply_value)
        scratch = torch.empty_like(out)
        n = out.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](out, scratch, n, BLOCK=1024)
        return out
