"""Bad: does not compile. The launch is dispatched over AT_DISPATCH_FLOATING_TYPES, so it is
instantiated for scalar_t = double as well as float, but the kernel takes float pointers:
the double instantiation passes a double* where a const float* is expected."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = "torch::Tensor tanh_forward(torch::Tensor x);"

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void tanh_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = tanhf(x[i]);
}

torch::Tensor tanh_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "tanh_forward: a CUDA tensor");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, (int64_t)1 << 20);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "tanh_forward", [&] {
        tanh_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kb_cuda_1_22_tanh_bad_template_type",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["tanh_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.tanh_forward(x)
