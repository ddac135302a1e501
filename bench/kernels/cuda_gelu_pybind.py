"""The gelu example with its Python binding written in the CUDA source (as many

KernelBench kernels do): the .cu needs torch/extension.h's pybind11 part, so
the judge builds it as written, without the torch/types.h try (which failed,
costing 7 s, before the stand-in learned to skip it for such files).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = ""

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

template <typename scalar_t>
__global__ void gelu_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t n) {
    // Grid-stride loop: the grid is sized to fill the GPU, not to cover n.
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = static_cast<float>(x[i]);
        // Exact GELU, as torch's default: 0.5 * v * (1 + erf(v / sqrt(2))).
        y[i] = static_cast<scalar_t>(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
    }
}

torch::Tensor gelu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() != at::kDouble, "float64 is not supported");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    const int threads = 256;
    const int64_t max_blocks = (int64_t)at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 8;
    const int blocks = (int)std::min((n + threads - 1) / threads, max_blocks);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "gelu_forward", [&] {
        gelu_kernel<scalar_t><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("gelu_forward", &gelu_forward, "exact GELU");
}
"""

_ext = load_inline(
    name="kernelevo_bench_gelu_pybind",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.gelu_forward(x.contiguous())


reference = nn.GELU()  # what bench/cuda_build_speed.py checks ModelNew against
