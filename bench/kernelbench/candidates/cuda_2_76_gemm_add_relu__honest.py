"""Honest: the GEMM through cuBLAS (torch.mm with the bias-free Linear's weight), then one
CUDA kernel (load_inline) over the (M, N) product: max(y + bias[column], 0)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = "torch::Tensor add_relu_forward(torch::Tensor y, torch::Tensor bias);"

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void add_relu_kernel(const float* __restrict__ y, const float* __restrict__ bias,
                                float* __restrict__ out, int64_t n, int64_t cols) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = fmaxf(y[i] + bias[i % cols], 0.0f);
}

torch::Tensor add_relu_forward(torch::Tensor y, torch::Tensor bias) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.dim() == 2,
                "add_relu_forward: a 2-D float32 CUDA tensor");
    y = y.contiguous();
    bias = bias.contiguous();
    TORCH_CHECK(bias.numel() == y.size(1), "one bias per column");
    auto out = torch::empty_like(y);
    const int64_t n = y.numel();
    if (n == 0) return out;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, (int64_t)1 << 20);
    add_relu_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n, y.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kb_cuda_2_76_gemm_add_relu_honest",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["add_relu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        y = torch.mm(x, self.gemm.weight.t())
        return _ext.add_relu_forward(y, self.bias)
