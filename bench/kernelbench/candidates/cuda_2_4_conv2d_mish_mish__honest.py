"""Honest: Conv2d through cuDNN (F.conv2d with the module's weight, no bias), then one CUDA
kernel (load_inline): + conv bias[c], then Mish twice, x * tanhf(log1pf(expf(x)))."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CPP_SRC = "torch::Tensor bias_mish_mish_forward(torch::Tensor y, torch::Tensor conv_bias);"

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float mish(float x) {
    // expf overflows to inf for x > 88: log1pf(inf) = inf and tanhf(inf) = 1, so mish = x
    return x * tanhf(log1pf(expf(x)));
}

__global__ void bias_mish_mish_kernel(const float* __restrict__ y,
                                      const float* __restrict__ conv_bias,
                                      float* __restrict__ out, int64_t n, int64_t hw,
                                      int64_t channels) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = y[i] + conv_bias[(i / hw) % channels];
        out[i] = mish(mish(v));
    }
}

torch::Tensor bias_mish_mish_forward(torch::Tensor y, torch::Tensor conv_bias) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.dim() == 4,
                "bias_mish_mish_forward: a 4-D float32 CUDA tensor");
    y = y.contiguous();
    conv_bias = conv_bias.contiguous();
    auto out = torch::empty_like(y);
    const int64_t n = y.numel();
    if (n == 0) return out;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, (int64_t)1 << 20);
    bias_mish_mish_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), conv_bias.data_ptr<float>(), out.data_ptr<float>(), n,
        y.size(2) * y.size(3), y.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kb_cuda_2_4_conv2d_mish_mish_honest",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["bias_mish_mish_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        conv = self.conv
        y = F.conv2d(x, conv.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
        return _ext.bias_mish_mish_forward(y, conv.bias)
