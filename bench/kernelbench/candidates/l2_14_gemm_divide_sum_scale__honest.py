"""Honest: the GEMM through cuBLAS (torch.mm with the module's weight), then one Triton
row-reduction kernel: each program sums its row of the product / 2 in fp32 lanes and
writes sum * scaling factor to the (batch, 1) output."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def half_row_sum_scale_kernel(y_ptr, out_ptr, N, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * N
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(y_ptr + base + cols, mask=cols < N, other=0.0) / 2.0
    tl.store(out_ptr + row, tl.sum(acc, axis=0) * scale)


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = torch.mm(x, self.weight.t())
        m, n = y.shape
        out = torch.empty((m, 1), device=y.device, dtype=y.dtype)
        block = min(1024, triton.next_power_of_2(n))
        half_row_sum_scale_kernel[(m,)](y, out, n, float(self.scaling_factor), BLOCK=block,
                                        num_warps=4)
        return out
