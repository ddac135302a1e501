"""Honest: row softmax in one CUDA kernel (load_inline): one 1024-thread block per row, a
block max, a block sum of exp(x - max) (warp shuffles, then one shared-memory step), and
a third pass that writes exp(x - max) / sum."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = "torch::Tensor softmax_forward(torch::Tensor x);"

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

constexpr int THREADS = 1024;  // 32 warps: the second reduction step is one full warp
static_assert(THREADS / 32 == 32, "one partial per lane of warp 0");

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void __launch_bounds__(THREADS) softmax_rows_kernel(
        const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float partial[32];
    __shared__ float shared_value;
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float* yr = y + (int64_t)blockIdx.x * cols;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    if (lane == 0) partial[warp] = m;
    __syncthreads();
    if (warp == 0) {
        m = warp_max(partial[lane]);
        if (lane == 0) shared_value = m;
    }
    __syncthreads();
    m = shared_value;

    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) s += expf(xr[c] - m);
    s = warp_sum(s);
    __syncthreads();  // every thread has read shared_value before it is reused
    if (lane == 0) partial[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = warp_sum(partial[lane]);
        if (lane == 0) shared_value = s;
    }
    __syncthreads();
    const float inv = 1.0f / shared_value;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) yr[c] = expf(xr[c] - m) * inv;
}

torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 2,
                "softmax_forward: a 2-D float32 CUDA tensor");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0), cols = x.size(1);
    if (rows == 0 || cols == 0) return y;
    softmax_rows_kernel<<<(unsigned)rows, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kb_cuda_1_23_softmax_honest",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["softmax_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.softmax_forward(x)
