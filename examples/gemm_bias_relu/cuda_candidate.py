import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = "torch::Tensor linear_relu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias);"

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

// Block tile BM x BN of the output, stepping through K in slices of BK.
// 256 threads, each owning TM x TN outputs, so every value loaded from
// shared memory feeds TM (or TN) FMAs instead of one.
constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;
constexpr int THREADS = (BM / TM) * (BN / TN);
static_assert(BM == BN, "the tile loader fills both tiles in one loop");

// y[m, n] = relu(sum_k x[m, k] * w[n, k] + b[n]); x is (M, K), w is (N, K)
// as nn.Linear stores it.
template <typename scalar_t>
__global__ void __launch_bounds__(THREADS) linear_relu_kernel(
        const scalar_t* __restrict__ x, const scalar_t* __restrict__ w, const scalar_t* __restrict__ b,
        scalar_t* __restrict__ y, int M, int N, int K) {
    // K-major tiles: the inner loop reads a row of each. The +4 padding
    // spreads the transposing stores over more banks.
    __shared__ float xs[BK][BM + 4];
    __shared__ float ws[BK][BN + 4];

    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Neighbouring threads read neighbouring k of one row (coalesced).
        // Out-of-range elements load as 0 and add nothing to the sums.
        for (int i = tid; i < BM * BK; i += THREADS) {
            const int r = i / BK, c = i % BK, gk = k0 + c;
            const int gm = m0 + r, gn = n0 + r;
            xs[c][r] = (gm < M && gk < K) ? static_cast<float>(x[(int64_t)gm * K + gk]) : 0.0f;
            ws[c][r] = (gn < N && gk < K) ? static_cast<float>(w[(int64_t)gn * K + gk]) : 0.0f;
        }
        __syncthreads();

        #pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            // Thread rows/cols are strided by 16 rather than contiguous, so
            // a warp reads 16 consecutive floats: no bank conflicts.
            float a[TM], bv[TN];
            #pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = xs[kk][ty + i * (BM / TM)];
            #pragma unroll
            for (int j = 0; j < TN; ++j) bv[j] = ws[kk][tx + j * (BN / TN)];
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
        }
        __syncthreads();  // before the next slice overwrites the tiles
    }

    #pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + ty + i * (BM / TM);
        #pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = n0 + tx + j * (BN / TN);
            if (m < M && n < N) {
                const float v = acc[i][j] + static_cast<float>(b[n]);
                y[(int64_t)m * N + n] = static_cast<scalar_t>(fmaxf(v, 0.0f));
            }
        }
    }
}

torch::Tensor linear_relu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "tensors must be on a CUDA device");
    TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && bias.dim() == 1, "expected x (M, K), weight (N, K), bias (N)");
    TORCH_CHECK(x.size(1) == weight.size(1) && bias.size(0) == weight.size(0), "shape mismatch");
    TORCH_CHECK(x.scalar_type() != at::kDouble, "float64 is not supported");
    TORCH_CHECK(weight.scalar_type() == x.scalar_type() && bias.scalar_type() == x.scalar_type(),
                "weight and bias must have the dtype of x");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
    TORCH_CHECK(M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31), "dimensions must fit in int32");
    auto y = torch::empty({M, N}, x.options());
    if (M == 0 || N == 0) return y;
    const dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM));
    TORCH_CHECK(grid.y <= 65535, "batch too large for the grid's y dimension");
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "linear_relu_forward", [&] {
        linear_relu_kernel<scalar_t><<<grid, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(),
            y.data_ptr<scalar_t>(), (int)M, (int)N, (int)K);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    return y;
}
"""

_ext = load_inline(
    name="kernelevo_example_gemm_bias_relu",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["linear_relu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        # Same module as the reference, so the same seed gives the same weights.
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.linear_relu_forward(x.contiguous(), self.linear.weight, self.linear.bias)
