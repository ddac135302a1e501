import torch
import torch.nn as nn
import triton
import triton.language as tl

# Rows up to this many elements are held in registers; longer rows are refused.
MAX_ROW = 16384
# Programs of the backward: each takes a contiguous group of rows and writes one
# partial sum of dweight and dbias, which a second kernel reduces.
MAX_GROUPS = 256
REDUCE_ROWS = 32
REDUCE_COLS = 128


@triton.jit
def _layernorm_forward(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n_cols, stride, eps,
                       BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    # Mean first, then centred squares: E[x^2] - E[x]^2 cancels when |mean| >> std.
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty),
             mask=mask)
    # Kept for the backward, which then needs no second pass over x for them.
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def _layernorm_backward(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_part_ptr,
                        db_part_ptr, n_rows, n_cols, stride, rows_per_group,
                        BLOCK: tl.constexpr):
    group = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    col_mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK], dtype=tl.float32)
    db = tl.zeros([BLOCK], dtype=tl.float32)
    first = group * rows_per_group
    for step in range(0, rows_per_group):
        row = first + step
        mask = col_mask & (row < n_rows)
        offsets = row.to(tl.int64) * stride + cols
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        in_rows = row < n_rows
        mean = tl.load(mean_ptr + row, mask=in_rows, other=0.0)
        rstd = tl.load(rstd_ptr + row, mask=in_rows, other=0.0)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        wdy = w * dy
        # dx = rstd * (w*dy - mean(w*dy) - xhat * mean(w*dy * xhat))
        c_xhat = tl.sum(xhat * wdy, axis=0) / n_cols
        c_mean = tl.sum(wdy, axis=0) / n_cols
        dx = (wdy - (xhat * c_xhat + c_mean)) * rstd
        tl.store(dx_ptr + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += dy * xhat
        db += dy
    tl.store(dw_part_ptr + group * n_cols + cols, dw, mask=col_mask)
    tl.store(db_part_ptr + group * n_cols + cols, db, mask=col_mask)


@triton.jit
def _sum_groups(dw_part_ptr, db_part_ptr, dw_ptr, db_ptr, n_groups, n_cols,
                ROWS: tl.constexpr, COLS: tl.constexpr):
    cols = tl.program_id(0) * COLS + tl.arange(0, COLS)
    col_mask = cols < n_cols
    dw = tl.zeros([ROWS, COLS], dtype=tl.float32)
    db = tl.zeros([ROWS, COLS], dtype=tl.float32)
    for start in range(0, n_groups, ROWS):
        rows = start + tl.arange(0, ROWS)
        mask = (rows[:, None] < n_groups) & col_mask[None, :]
        offsets = rows[:, None] * n_cols + cols[None, :]
        dw += tl.load(dw_part_ptr + offsets, mask=mask, other=0.0)
        db += tl.load(db_part_ptr + offsets, mask=mask, other=0.0)
    tl.store(dw_ptr + cols, tl.sum(dw, axis=0).to(dw_ptr.dtype.element_ty), mask=col_mask)
    tl.store(db_ptr + cols, tl.sum(db, axis=0).to(db_ptr.dtype.element_ty), mask=col_mask)


def _row_block(n_cols: int) -> tuple[int, int]:
    block = triton.next_power_of_2(n_cols)
    if block > MAX_ROW:
        raise ValueError(f"rows of {n_cols} elements are longer than this kernel's "
                         f"{MAX_ROW}")
    return block, (4 if block <= 2048 else (8 if block <= 8192 else 16))


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        n_rows = x2.shape[0]
        y = torch.empty_like(x2)
        mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        block, num_warps = _row_block(n_cols)
        _layernorm_forward[(n_rows,)](x2, weight, bias, y, mean, rstd, n_cols, x2.stride(0),
                                      eps, BLOCK=block, num_warps=num_warps)
        ctx.save_for_backward(x2, weight, mean, rstd)
        ctx.shape = x.shape
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2, weight, mean, rstd = ctx.saved_tensors
        n_rows, n_cols = x2.shape
        dy2 = dy.contiguous().view(n_rows, n_cols)
        dx = torch.empty_like(x2)
        groups = min(MAX_GROUPS, n_rows)
        rows_per_group = triton.cdiv(n_rows, groups)
        groups = triton.cdiv(n_rows, rows_per_group)
        dw_part = torch.empty((groups, n_cols), dtype=torch.float32, device=x2.device)
        db_part = torch.empty((groups, n_cols), dtype=torch.float32, device=x2.device)
        block, num_warps = _row_block(n_cols)
        _layernorm_backward[(groups,)](dy2, x2, weight, mean, rstd, dx, dw_part, db_part,
                                       n_rows, n_cols, x2.stride(0), rows_per_group,
                                       BLOCK=block, num_warps=num_warps)
        dw = torch.empty_like(weight)
        db = torch.empty_like(weight)
        _sum_groups[(triton.cdiv(n_cols, REDUCE_COLS),)](dw_part, db_part, dw, db, groups,
                                                         n_cols, ROWS=REDUCE_ROWS,
                                                         COLS=REDUCE_COLS)
        return dx.view(ctx.shape), dw, db, None


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        # The reference's module and initialisation, so the same seed gives the same weights.
        self.ln = nn.LayerNorm(normalized_shape=dim)
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.5)
            self.ln.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _LayerNorm.apply(x, self.ln.weight, self.ln.bias, self.ln.eps)
