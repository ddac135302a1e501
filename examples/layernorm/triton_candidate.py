import torch
import torch.nn as nn
import triton
import triton.language as tl

# Rows up to this many elements are held in registers: one read, one write.
# Longer rows are streamed in chunks of CHUNK (statistics pass, then normalise).
MAX_FUSED_ROW = 16384
CHUNK = 4096


@triton.jit
def _layernorm_row_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                          BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    # Two passes over registers (mean, then centred squares) instead of
    # E[x^2] - E[x]^2, which cancels badly when |mean| >> std.
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = xc * rstd * w + b
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_chunked_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                              BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)

    # Statistics in one read: each chunk's mean and centred sum of squares are
    # merged into the running ones (Chan et al.), which stays accurate where
    # a plain sum of squares would cancel.
    mean = tl.zeros([], tl.float32)
    m2 = tl.zeros([], tl.float32)
    n_seen = tl.zeros([], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        n_chunk = tl.sum(mask.to(tl.float32), axis=0)
        chunk_mean = tl.sum(x, axis=0) / n_chunk
        xc = tl.where(mask, x - chunk_mean, 0.0)
        n_total = n_seen + n_chunk
        delta = chunk_mean - mean
        mean = mean + delta * (n_chunk / n_total)
        m2 = m2 + tl.sum(xc * xc, axis=0) + delta * delta * (n_seen * n_chunk / n_total)
        n_seen = n_total
    rstd = 1.0 / tl.sqrt(m2 / n_cols + eps)

    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        # Same module as the reference, so the same seed gives the same parameters.
        self.ln = nn.LayerNorm(normalized_shape=dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        x2 = x.view(-1, n_cols)
        y = torch.empty_like(x2)
        w = self.ln.weight.contiguous()
        b = self.ln.bias.contiguous()
        block = triton.next_power_of_2(n_cols)
        if block <= MAX_FUSED_ROW:
            num_warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)
            _layernorm_row_kernel[(x2.shape[0],)](
                x2, w, b, y, n_cols, x2.stride(0), y.stride(0), self.ln.eps,
                BLOCK=block, num_warps=num_warps,
            )
        else:
            _layernorm_chunked_kernel[(x2.shape[0],)](
                x2, w, b, y, n_cols, x2.stride(0), y.stride(0), self.ln.eps,
                BLOCK=CHUNK, num_warps=8,
            )
        return y.view(x.shape)
