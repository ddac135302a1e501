"""The smallest CUDA candidate worth the name: y = x + 1, load_inline's implicit headers only."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = "torch::Tensor add_one(torch::Tensor x);"

CUDA_SRC = r"""
__global__ void add_one_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}

torch::Tensor add_one(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "x: float32 on the GPU");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    if (n > 0) {
        add_one_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    }
    return y;
}
"""

_ext = load_inline(name="kernelevo_bench_add_one", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["add_one"])


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.add_one(x)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x + 1.0
