"""Bad: wrong mask. The row kernel masks its loads (other=0.0) but not the reduction, so
every padded lane adds sigmoid(0) = 0.5 to the row sum. The task's 32768 columns are a
multiple of the block, so it is right at the task's own sizes and wrong at any other."""
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
        acc += 1.0 / (1.0 + tl.exp(-v))  # padded lanes: sigmoid(0) = 0.5 each
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
