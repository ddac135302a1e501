"""Honest: the GEMM through cuBLAS (torch.mm with the Linear's weight, no bias), then one
Triton row-reduction kernel: sigmoid(y + bias) summed over each row in fp32 lanes (masked
lanes contribute 0, not sigmoid(0)), written to the (batch, 1) output."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_sigmoid_row_sum_kernel(y_ptr, bias_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * N
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        v = tl.load(y_ptr + base + cols, mask=mask, other=0.0)
        v = v + tl.load(bias_ptr + cols, mask=mask, other=0.0)
        acc += tl.where(mask, 1.0 / (1.0 + tl.exp(-v)), 0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.linear = nn.Linear(input_size, hidden_size)

    def forward(self, x):
        y = torch.mm(x, self.linear.weight.t())
        m, n = y.shape
        out = torch.empty((m, 1), device=y.device, dtype=y.dtype)
        block = min(2048, triton.next_power_of_2(n))
        bias_sigmoid_row_sum_kernel[(m,)](y, self.linear.bias, out, n, BLOCK=block, num_warps=8)
        return out
