"""Honest: sum over one dimension in one CUDA kernel (load_inline): the input is seen as
(outer, R, inner); one thread per output element sums its R values in fp32, so threads
next to each other read neighbouring addresses when inner > 1."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = "torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim);"

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void sum_dim_kernel(const float* __restrict__ x, float* __restrict__ y,
                               int64_t outer, int64_t r, int64_t inner) {
    const int64_t total = outer * inner;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += stride) {
        const int64_t o = idx / inner, i = idx - o * inner;
        const float* p = x + o * r * inner + i;
        float acc = 0.0f;
        for (int64_t k = 0; k < r; ++k) acc += p[k * inner];
        y[idx] = acc;
    }
}

torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32,
                "sum_dim_forward: a float32 CUDA tensor");
    x = x.contiguous();
    if (dim < 0) dim += x.dim();
    TORCH_CHECK(dim >= 0 && dim < x.dim(), "sum_dim_forward: dim out of range");
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
    for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
    const int64_t r = x.size(dim);
    auto sizes = x.sizes().vec();
    sizes[dim] = 1;
    auto y = torch::empty(sizes, x.options());
    const int64_t total = outer * inner;
    if (total == 0) return y;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, (int64_t)1 << 20);
    sum_dim_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), outer, r, inner);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kb_cuda_1_47_sum_dim_honest",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["sum_dim_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.sum_dim_forward(x, self.dim)
