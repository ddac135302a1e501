"""Honest: cross-entropy with integer targets: per row logsumexp (online max/sum in
fp32 lanes) minus the target logit, then the mean over rows in one program.
Rows whose target is ignore_index (-100) count for nothing, as in PyTorch."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_loss_kernel(x_ptr, target_ptr, loss_ptr, valid_ptr, n_cols, stride_x,
                    BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        empty = m_new == float("-inf")
        s = s * tl.where(empty, 0.0, tl.exp(m - m_new)) + tl.where(empty, 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    lse = row_max + tl.log(tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - row_max)),
                                  axis=0))
    target = tl.load(target_ptr + row)
    valid = target != -100
    picked = tl.load(x_row + tl.where(valid, target, 0)).to(tl.float32)
    tl.store(loss_ptr + row, tl.where(valid, lse - picked, 0.0))
    tl.store(valid_ptr + row, tl.where(valid, 1.0, 0.0))


@triton.jit
def mean_kernel(loss_ptr, valid_ptr, out_ptr, n_rows, BLOCK: tl.constexpr):
    lanes = tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], tl.float32)
    count = tl.zeros([BLOCK], tl.float32)
    for off in range(0, n_rows, BLOCK):
        mask = off + lanes < n_rows
        total += tl.load(loss_ptr + off + lanes, mask=mask, other=0.0)
        count += tl.load(valid_ptr + off + lanes, mask=mask, other=0.0)
    mean = tl.sum(total, axis=0) / tl.sum(count, axis=0)
    tl.store(out_ptr, mean.to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = predictions.contiguous()
        targets = targets.contiguous()
        n_rows, n_cols = x.shape
        losses = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        valid = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        block = min(triton.next_power_of_2(n_cols), 4096)
        row_loss_kernel[(n_rows,)](x, targets, losses, valid, n_cols, x.stride(0), BLOCK=block,
                                   num_warps=8 if block >= 2048 else 4)
        out = torch.empty((), device=x.device, dtype=x.dtype)
        mean_kernel[(1,)](losses, valid, out, n_rows, BLOCK=1024, num_warps=4)
        return out
