"""Honest (forward and backward): Gemm + bias + ReLU, every step in own Triton kernels,
in an autograd.Function (the GEMM too: tiled tl.dot in fp32, input_precision='ieee').

forward   out = relu(x @ W^T + b), one GEMM kernel with the bias and ReLU in its epilogue
backward  g  = grad_out where out > 0, else 0         (elementwise kernel)
          dx = g @ W      (M x N by N x K)             (the GEMM kernel, strided operands)
          dW = g^T @ x    (N x M by M x K)             (the same kernel, g read transposed)
          db = column sums of g                        (column-reduction kernel)
The layers are the task's (a bias-free nn.Linear and a bias Parameter, built in the same
order), so the same seed gives the same weights.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn,
                  BIAS_RELU: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    """C (M x N, contiguous) = A @ B for strided A (M x K) and B (K x N); with BIAS_RELU
    the epilogue adds bias[n] and applies ReLU."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    a_rows = a_ptr + rm[:, None].to(tl.int64) * stride_am
    b_cols = b_ptr + rn[None, :].to(tl.int64) * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + rk
        k_ok = k < K
        a = tl.load(a_rows + k[None, :].to(tl.int64) * stride_ak,
                    mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_cols + k[:, None].to(tl.int64) * stride_bk,
                    mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    if BIAS_RELU:
        bias = tl.load(bias_ptr + rn, mask=n_ok, other=0.0)
        acc = tl.maximum(acc + bias[None, :], 0.0)
    c = c_ptr + rm[:, None].to(tl.int64) * N + rn[None, :]
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def relu_grad_kernel(dy_ptr, out_ptr, g_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0)
    out = tl.load(out_ptr + offs, mask=mask, other=0.0)
    tl.store(g_ptr + offs, tl.where(out > 0.0, dy, 0.0), mask=mask)


@triton.jit
def column_sum_kernel(g_ptr, db_ptr, M, N, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cols < N
    acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    for r0 in range(0, M, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        mask = (rows < M)[:, None] & c_ok[None, :]
        acc += tl.load(g_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], mask=mask,
                       other=0.0)
    tl.store(db_ptr + cols, tl.sum(acc, axis=0).to(db_ptr.dtype.element_ty), mask=c_ok)


def _matmul(a, b, bias=None):
    """a (M x K) @ b (K x N), any strides; bias given: relu(a @ b + bias)."""
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N))
    matmul_kernel[grid](a, b, c, bias if bias is not None else c, m, n, k,
                        a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        BIAS_RELU=bias is not None, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                        BLOCK_K=BLOCK_K, num_warps=4)
    return c


class _GemmAddReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        x, bias = x.contiguous(), bias.contiguous()
        out = _matmul(x, weight.t(), bias)  # weight is (N, K): W^T read through strides
        ctx.save_for_backward(x, weight, out)
        return out

    @staticmethod
    def backward(ctx, dy):
        x, weight, out = ctx.saved_tensors
        dy = dy.contiguous()
        m, n = out.shape
        g = torch.empty_like(out)
        relu_grad_kernel[(triton.cdiv(m * n, 4096),)](dy, out, g, m * n, BLOCK=4096,
                                                      num_warps=8)
        dx = _matmul(g, weight)
        dw = _matmul(g.t(), x)
        db = torch.empty(n, device=out.device, dtype=out.dtype)
        column_sum_kernel[(triton.cdiv(n, 128),)](g, db, m, n, BLOCK_R=32, BLOCK_C=128,
                                                  num_warps=4)
        return dx, dw, db


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return _GemmAddReLU.apply(x, self.gemm.weight, self.bias)
