"""Honest: the GEMM through cuBLAS (torch.mm with the Linear's weight, no bias), then one
CUDA kernel (load_inline): (y + bias[column]) / divisor, exact GELU with erff."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = ("torch::Tensor bias_div_gelu_forward(torch::Tensor y, torch::Tensor bias, "
           "double divisor);")

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void bias_div_gelu_kernel(const float* __restrict__ y, const float* __restrict__ bias,
                                     float* __restrict__ out, int64_t n, int64_t cols,
                                     float divisor) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = (y[i] + bias[i % cols]) / divisor;
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

torch::Tensor bias_div_gelu_forward(torch::Tensor y, torch::Tensor bias, double divisor) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.dim() == 2,
                "bias_div_gelu_forward: a 2-D float32 CUDA tensor");
    y = y.contiguous();
    bias = bias.contiguous();
    TORCH_CHECK(bias.numel() == y.size(1), "one bias per column");
    auto out = torch::empty_like(y);
    const int64_t n = y.numel();
    if (n == 0) return out;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, (int64_t)1 << 20);
    bias_div_gelu_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n, y.size(1),
        (float)divisor);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kb_cuda_2_86_matmul_divide_gelu_honest",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["bias_div_gelu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.divisor = divisor

    def forward(self, x):
        y = torch.mm(x, self.linear.weight.t())
        return _ext.bias_div_gelu_forward(y, self.linear.bias, float(self.divisor))
