"""Honest: GroupNorm with the layer's per-channel weight and bias.

Rows longer than a chunk (as in the task): three kernels, per-chunk mean and
M2 (two-pass inside a chunk held in registers), an exact combination per row,
then the normalisation, so even a few huge rows fill the GPU. Rows that fit
one chunk: a single fused kernel.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def chunk_stats_kernel(x_ptr, mean_ptr, m2_ptr, row_len, n_chunks, CHUNK: tl.constexpr):
    """Mean and sum of squared deviations of one CHUNK of one row (two-pass, in registers)."""
    pid = tl.program_id(0)
    row = (pid // n_chunks).to(tl.int64)
    start = (pid % n_chunks) * CHUNK
    offs = start + tl.arange(0, CHUNK)
    mask = offs < row_len
    x = tl.load(x_ptr + row * row_len + offs, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(row_len - start, CHUNK).to(tl.float32)
    mean = tl.sum(x, axis=0) / count
    d = tl.where(mask, x - mean, 0.0)
    tl.store(mean_ptr + pid, mean)
    tl.store(m2_ptr + pid, tl.sum(d * d, axis=0))


@triton.jit
def row_stats_kernel(mean_ptr, m2_ptr, row_mean_ptr, row_rstd_ptr, row_len, n_chunks, eps,
                     CHUNK: tl.constexpr, BLOCK_P: tl.constexpr):
    """Combine a row's chunk statistics exactly: M2 = sum(m2_i + n_i (mean_i - mean)^2)."""
    row = tl.program_id(0).to(tl.int64)
    base = row * n_chunks
    ps = tl.arange(0, BLOCK_P)
    acc = tl.zeros([BLOCK_P], tl.float32)
    for p0 in range(0, n_chunks, BLOCK_P):
        p = p0 + ps
        ok = p < n_chunks
        n_i = tl.minimum(row_len - p * CHUNK, CHUNK).to(tl.float32)
        acc += tl.where(ok, n_i * tl.load(mean_ptr + base + p, mask=ok, other=0.0), 0.0)
    mean = tl.sum(acc, axis=0) / row_len
    acc = tl.zeros([BLOCK_P], tl.float32)
    for p0 in range(0, n_chunks, BLOCK_P):
        p = p0 + ps
        ok = p < n_chunks
        n_i = tl.minimum(row_len - p * CHUNK, CHUNK).to(tl.float32)
        d = tl.load(mean_ptr + base + p, mask=ok, other=0.0) - mean
        acc += tl.where(ok, tl.load(m2_ptr + base + p, mask=ok, other=0.0) + n_i * d * d, 0.0)
    var = tl.sum(acc, axis=0) / row_len  # biased, as the norm layers use
    tl.store(row_mean_ptr + row, mean)
    tl.store(row_rstd_ptr + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def normalize_kernel(x_ptr, y_ptr, row_mean_ptr, row_rstd_ptr, w_ptr, b_ptr, row_len, n_chunks,
                     groups, channels_per_group, spatial,
                     AFFINE: tl.constexpr, CHUNK: tl.constexpr):
    """y = (x - mean) * rstd, then the affine map: AFFINE 0 none, 1 per element of the
    row (LayerNorm), 2 per channel (GroupNorm: channel from the group and the offset)."""
    pid = tl.program_id(0)
    row = (pid // n_chunks).to(tl.int64)
    offs = (pid % n_chunks) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < row_len
    x = tl.load(x_ptr + row * row_len + offs, mask=mask, other=0.0).to(tl.float32)
    y = (x - tl.load(row_mean_ptr + row)) * tl.load(row_rstd_ptr + row)
    if AFFINE == 1:
        y = y * tl.load(w_ptr + offs, mask=mask, other=0.0) + tl.load(b_ptr + offs, mask=mask,
                                                                      other=0.0)
    if AFFINE == 2:
        channel = (row % groups) * channels_per_group + offs // spatial
        y = y * tl.load(w_ptr + channel, mask=mask, other=0.0) + tl.load(b_ptr + channel,
                                                                         mask=mask, other=0.0)
    tl.store(y_ptr + row * row_len + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fused_row_kernel(x_ptr, y_ptr, w_ptr, b_ptr, row_len, eps, groups, channels_per_group,
                     spatial, AFFINE: tl.constexpr, BLOCK: tl.constexpr):
    """A row that fits one block: statistics (two-pass, in registers) and output at once."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < row_len
    x = tl.load(x_ptr + row * row_len + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / row_len
    d = tl.where(mask, x - mean, 0.0)
    y = d / tl.sqrt(tl.sum(d * d, axis=0) / row_len + eps)
    if AFFINE == 1:
        y = y * tl.load(w_ptr + offs, mask=mask, other=0.0) + tl.load(b_ptr + offs, mask=mask,
                                                                      other=0.0)
    if AFFINE == 2:
        channel = (row % groups) * channels_per_group + offs // spatial
        y = y * tl.load(w_ptr + channel, mask=mask, other=0.0) + tl.load(b_ptr + channel,
                                                                         mask=mask, other=0.0)
    tl.store(y_ptr + row * row_len + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _normalize_rows(x, rows, row_len, eps, weight, bias, affine, groups=1, per_group=1,
                    spatial=1):
    """Normalise each of `rows` contiguous rows of length `row_len` of x."""
    chunk = 4096
    if row_len <= chunk:  # short rows: one fused kernel, one program per row
        y = torch.empty_like(x)
        block = triton.next_power_of_2(row_len)
        fused_row_kernel[(rows,)](x, y, weight, bias, row_len, eps, groups, per_group, spatial,
                                  AFFINE=affine, BLOCK=block, num_warps=8 if block >= 2048 else 4)
        return y
    n_chunks = triton.cdiv(row_len, chunk)
    part_mean = torch.empty(rows * n_chunks, device=x.device, dtype=torch.float32)
    part_m2 = torch.empty_like(part_mean)
    row_mean = torch.empty(rows, device=x.device, dtype=torch.float32)
    row_rstd = torch.empty_like(row_mean)
    y = torch.empty_like(x)
    chunk_stats_kernel[(rows * n_chunks,)](x, part_mean, part_m2, row_len, n_chunks,
                                           CHUNK=chunk, num_warps=8)
    block_p = min(1024, triton.next_power_of_2(n_chunks))
    row_stats_kernel[(rows,)](part_mean, part_m2, row_mean, row_rstd, row_len, n_chunks, eps,
                              CHUNK=chunk, BLOCK_P=block_p, num_warps=4)
    normalize_kernel[(rows * n_chunks,)](x, y, row_mean, row_rstd, weight, bias, row_len,
                                         n_chunks, groups, per_group, spatial,
                                         AFFINE=affine, CHUNK=chunk, num_warps=8)
    return y


class ModelNew(nn.Module):
    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        # Holds weight, bias, eps and the group count exactly as the reference creates them.
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        groups = self.gn.num_groups
        channels = x.shape[1]
        rows = x.shape[0] * groups
        row_len = x.numel() // rows
        spatial = row_len // (channels // groups)
        return _normalize_rows(x, rows, row_len, self.gn.eps, self.gn.weight.contiguous(),
                               self.gn.bias.contiguous(), affine=2, groups=groups,
                               per_group=channels // groups, spatial=spatial)
