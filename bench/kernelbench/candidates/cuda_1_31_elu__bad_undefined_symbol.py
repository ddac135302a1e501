"""Bad: an unresolved symbol. cpp_sources declares elu_forward(Tensor, double) and the
binding calls that, but the CUDA source defines elu_forward(Tensor, float), another
overload with another mangled name. The shared object links (undefined symbols are
allowed there) and fails when loaded: undefined symbol _Z11elu_forwardN2at6TensorEd."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = "torch::Tensor elu_forward(torch::Tensor x, double alpha);"

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void elu_kernel(const float* __restrict__ x, float* __restrict__ y,
                         int64_t n, float alpha) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        y[i] = v > 0.0f ? v : alpha * expm1f(v);
    }
}

torch::Tensor elu_forward(torch::Tensor x, float alpha) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32,
                "elu_forward: a float32 CUDA tensor");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, (int64_t)1 << 20);
    elu_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n, (float)alpha);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kb_cuda_1_31_elu_bad_undefined_symbol",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["elu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.elu_forward(x, float(self.alpha))
