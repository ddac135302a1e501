import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

constexpr int THREADS = 256;  // a multiple of 32, at most 1024

// Sum over the block; every thread gets the result.
__device__ float block_sum(float v) {
    __shared__ float partial[THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    __syncthreads();  // the previous call may still be reading `partial`
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < THREADS / 32 ? partial[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// One block per row. Mean first, then the mean of centred squares: unlike
// E[x^2] - E[x]^2 this does not cancel when |mean| >> std. The extra reads of
// the row mostly hit L1/L2.
template <typename scalar_t>
__global__ void __launch_bounds__(THREADS) layernorm_kernel(
        const scalar_t* __restrict__ x, const scalar_t* __restrict__ w, const scalar_t* __restrict__ b,
        scalar_t* __restrict__ y, int64_t n_cols, float eps) {
    const scalar_t* xr = x + (int64_t)blockIdx.x * n_cols;
    scalar_t* yr = y + (int64_t)blockIdx.x * n_cols;

    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < n_cols; c += THREADS) sum += static_cast<float>(xr[c]);
    const float mean = block_sum(sum) / n_cols;

    float sq = 0.0f;
    for (int64_t c = threadIdx.x; c < n_cols; c += THREADS) {
        const float d = static_cast<float>(xr[c]) - mean;
        sq += d * d;
    }
    const float rstd = rsqrtf(block_sum(sq) / n_cols + eps);

    for (int64_t c = threadIdx.x; c < n_cols; c += THREADS) {
        const float v = (static_cast<float>(xr[c]) - mean) * rstd;
        yr[c] = static_cast<scalar_t>(v * static_cast<float>(w[c]) + static_cast<float>(b[c]));
    }
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "tensors must be on a CUDA device");
    TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
    TORCH_CHECK(x.scalar_type() != at::kDouble, "float64 is not supported");
    TORCH_CHECK(weight.scalar_type() == x.scalar_type() && bias.scalar_type() == x.scalar_type(),
                "weight and bias must have the dtype of x");
    const int64_t n_cols = x.size(-1);
    TORCH_CHECK(weight.numel() == n_cols && bias.numel() == n_cols, "weight/bias size must match the last dim");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n_rows = n_cols == 0 ? 0 : x.numel() / n_cols;
    if (n_rows == 0) return y;
    TORCH_CHECK(n_rows <= 0x7fffffff, "too many rows for a 1-D grid");
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "layernorm_forward", [&] {
        layernorm_kernel<scalar_t><<<(unsigned)n_rows, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(),
            y.data_ptr<scalar_t>(), n_cols, static_cast<float>(eps));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    return y;
}
"""

_ext = load_inline(
    name="kernelevo_example_layernorm",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["layernorm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        # Same module as the reference, so the same seed gives the same parameters.
        self.ln = nn.LayerNorm(normalized_shape=dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.layernorm_forward(x.contiguous(), self.ln.weight, self.ln.bias, self.ln.eps)
