"""Bad (incomplete backward): Gemm + bias + ReLU with own Triton kernels forward and
backward (tiled tl.dot GEMMs, the ReLU mask, as the honest candidate), but the backward
returns None for the bias: dx and dW are right, the bias gets no gradient."""
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
        return dx, dw, None


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return _GemmAddReLU.apply(x, self.gemm.weight, self.bias)
