"""Honest (forward and backward): LayerNorm over the trailing dims (the task's
normalized_shape, several dims) with the layer's elementwise weight and bias, in an
autograd.Function. Rows are the leading dims, each normalised over all of its trailing
elements, and may be far longer than a block (64 x 256 x 256 in the task), so every pass
works on (row, chunk) programs:

forward   1. per chunk: mean and sum of squared deviations (two passes in registers)
          2. per row: the chunks combined exactly (Chan et al.), mean and 1/std saved
          3. per chunk: y = (x - mean) * rstd * w + b
backward  4. per chunk: partial sums of w*dy and of w*dy*xhat (xhat = (x - mean) * rstd)
          5. per row: those sums combined, divided by the row length
          6. per chunk: dx = rstd * (w*dy - mean(w*dy) - xhat * mean(w*dy*xhat))
          7. per block of columns: dweight = sum over rows of dy*xhat, dbias = sum of dy
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHUNK = 4096
PART_BLOCK = 1024


@triton.jit
def ln_chunk_stats(x_ptr, part_mean_ptr, part_m2_ptr, row_len, n_chunks, CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid // n_chunks).to(tl.int64)
    start = (pid % n_chunks) * CHUNK
    offs = start + tl.arange(0, CHUNK)
    mask = offs < row_len
    x = tl.load(x_ptr + row * row_len + offs, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(row_len - start, CHUNK).to(tl.float32)
    mean = tl.sum(x, axis=0) / count
    d = tl.where(mask, x - mean, 0.0)
    tl.store(part_mean_ptr + pid, mean)
    tl.store(part_m2_ptr + pid, tl.sum(d * d, axis=0))


@triton.jit
def ln_row_stats(part_mean_ptr, part_m2_ptr, mean_ptr, rstd_ptr, row_len, n_chunks, eps,
                 CHUNK: tl.constexpr, PART_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    first = row * n_chunks
    lanes = tl.arange(0, PART_BLOCK)
    weighted = tl.zeros([PART_BLOCK], tl.float32)
    for p0 in range(0, n_chunks, PART_BLOCK):
        p = p0 + lanes
        ok = p < n_chunks
        count = tl.minimum(row_len - p * CHUNK, CHUNK).to(tl.float32)
        weighted += tl.where(ok, count * tl.load(part_mean_ptr + first + p, mask=ok, other=0.0),
                             0.0)
    mean = tl.sum(weighted, axis=0) / row_len
    m2 = tl.zeros([PART_BLOCK], tl.float32)
    for p0 in range(0, n_chunks, PART_BLOCK):
        p = p0 + lanes
        ok = p < n_chunks
        count = tl.minimum(row_len - p * CHUNK, CHUNK).to(tl.float32)
        shift = tl.load(part_mean_ptr + first + p, mask=ok, other=0.0) - mean
        part = tl.load(part_m2_ptr + first + p, mask=ok, other=0.0)
        m2 += tl.where(ok, part + count * shift * shift, 0.0)
    var = tl.sum(m2, axis=0) / row_len  # biased, as nn.LayerNorm
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def ln_normalize(x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, y_ptr, row_len, n_chunks,
                 CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid // n_chunks).to(tl.int64)
    offs = (pid % n_chunks) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < row_len
    x = tl.load(x_ptr + row * row_len + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    xhat = (x - tl.load(mean_ptr + row)) * tl.load(rstd_ptr + row)
    tl.store(y_ptr + row * row_len + offs, (xhat * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def ln_bwd_chunk_sums(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, part_a_ptr, part_b_ptr,
                      row_len, n_chunks, CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid // n_chunks).to(tl.int64)
    offs = (pid % n_chunks) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < row_len
    x = tl.load(x_ptr + row * row_len + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * row_len + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    xhat = tl.where(mask, (x - tl.load(mean_ptr + row)) * tl.load(rstd_ptr + row), 0.0)
    wdy = w * dy
    tl.store(part_a_ptr + pid, tl.sum(wdy, axis=0))
    tl.store(part_b_ptr + pid, tl.sum(wdy * xhat, axis=0))


@triton.jit
def ln_bwd_row_sums(part_a_ptr, part_b_ptr, c_mean_ptr, c_xhat_ptr, row_len, n_chunks,
                    PART_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    first = row * n_chunks
    lanes = tl.arange(0, PART_BLOCK)
    a = tl.zeros([PART_BLOCK], tl.float32)
    b = tl.zeros([PART_BLOCK], tl.float32)
    for p0 in range(0, n_chunks, PART_BLOCK):
        p = p0 + lanes
        ok = p < n_chunks
        a += tl.load(part_a_ptr + first + p, mask=ok, other=0.0)
        b += tl.load(part_b_ptr + first + p, mask=ok, other=0.0)
    tl.store(c_mean_ptr + row, tl.sum(a, axis=0) / row_len)
    tl.store(c_xhat_ptr + row, tl.sum(b, axis=0) / row_len)


@triton.jit
def ln_bwd_dx(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, c_mean_ptr, c_xhat_ptr, dx_ptr,
              row_len, n_chunks, CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid // n_chunks).to(tl.int64)
    offs = (pid % n_chunks) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < row_len
    x = tl.load(x_ptr + row * row_len + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * row_len + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    xhat = (x - tl.load(mean_ptr + row)) * rstd
    dx = (w * dy - tl.load(c_mean_ptr + row) - xhat * tl.load(c_xhat_ptr + row)) * rstd
    tl.store(dx_ptr + row * row_len + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def ln_bwd_affine(dy_ptr, x_ptr, mean_ptr, rstd_ptr, dw_ptr, db_ptr, n_rows, row_len,
                  BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < row_len
    dw = tl.zeros([BLOCK], tl.float32)
    db = tl.zeros([BLOCK], tl.float32)
    x_row = x_ptr + offs  # pointers step a row at a time (64-bit, whatever the row count)
    dy_row = dy_ptr + offs
    for r in range(0, n_rows):
        x = tl.load(x_row, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row, mask=mask, other=0.0).to(tl.float32)
        xhat = (x - tl.load(mean_ptr + r)) * tl.load(rstd_ptr + r)
        dw += dy * xhat
        db += dy
        x_row += row_len
        dy_row += row_len
    tl.store(dw_ptr + offs, dw.to(dw_ptr.dtype.element_ty), mask=mask)
    tl.store(db_ptr + offs, db.to(db_ptr.dtype.element_ty), mask=mask)


def _layout(x, weight):
    row_len = weight.numel()
    n_rows = x.numel() // row_len
    chunk = min(CHUNK, triton.next_power_of_2(row_len))
    return n_rows, row_len, chunk, triton.cdiv(row_len, chunk)


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        x = x.contiguous()
        weight, bias = weight.contiguous(), bias.contiguous()
        n_rows, row_len, chunk, n_chunks = _layout(x, weight)
        f32 = dict(device=x.device, dtype=torch.float32)
        part_mean = torch.empty(n_rows * n_chunks, **f32)
        part_m2 = torch.empty(n_rows * n_chunks, **f32)
        mean = torch.empty(n_rows, **f32)
        rstd = torch.empty(n_rows, **f32)
        y = torch.empty_like(x)
        ln_chunk_stats[(n_rows * n_chunks,)](x, part_mean, part_m2, row_len, n_chunks,
                                             CHUNK=chunk, num_warps=8)
        ln_row_stats[(n_rows,)](part_mean, part_m2, mean, rstd, row_len, n_chunks, eps,
                                CHUNK=chunk, PART_BLOCK=PART_BLOCK, num_warps=4)
        ln_normalize[(n_rows * n_chunks,)](x, weight, bias, mean, rstd, y, row_len, n_chunks,
                                           CHUNK=chunk, num_warps=8)
        ctx.save_for_backward(x, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        dy = dy.contiguous()
        n_rows, row_len, chunk, n_chunks = _layout(x, weight)
        f32 = dict(device=x.device, dtype=torch.float32)
        part_a = torch.empty(n_rows * n_chunks, **f32)
        part_b = torch.empty(n_rows * n_chunks, **f32)
        c_mean = torch.empty(n_rows, **f32)
        c_xhat = torch.empty(n_rows, **f32)
        ln_bwd_chunk_sums[(n_rows * n_chunks,)](dy, x, weight, mean, rstd, part_a, part_b,
                                                row_len, n_chunks, CHUNK=chunk, num_warps=8)
        ln_bwd_row_sums[(n_rows,)](part_a, part_b, c_mean, c_xhat, row_len, n_chunks,
                                   PART_BLOCK=PART_BLOCK, num_warps=4)
        dx = torch.empty_like(x)
        ln_bwd_dx[(n_rows * n_chunks,)](dy, x, weight, mean, rstd, c_mean, c_xhat, dx,
                                        row_len, n_chunks, CHUNK=chunk, num_warps=8)
        dw = torch.empty_like(weight)
        db = torch.empty_like(weight)
        block = min(1024, triton.next_power_of_2(row_len))
        ln_bwd_affine[(triton.cdiv(row_len, block),)](dy, x, mean, rstd, dw, db, n_rows,
                                                      row_len, BLOCK=block, num_warps=4)
        return dx, dw, db, None


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        # The reference's layer: its weight, bias and eps, created the same way.
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _LayerNorm.apply(x, self.ln.weight, self.ln.bias, self.ln.eps)
