"""The training step's own-kernel share on a GPU: profiled, noted, and failed without its own
backward (run with -m gpu)."""

import importlib.util
import re

import pytest
import torch

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.analysis.kernel_share import no_own_backward, unrecorded_training_note
from kernelevo.evaluate.child.share_training import training_step_share
from kernelevo.evaluate.child.worker_timing import _own_kernel_names
from kernelevo.evaluate.parent.judge import Judge
from kernelevo.task import load_task
from tests.conftest import ROOT, write

pytestmark = pytest.mark.gpu

EXAMPLE = ROOT / "examples" / "layernorm_backward"
TORCH_BACKWARD = ROOT / "tests" / "fixtures" / "candidates" / "backward_torch_autograd.py"


def _loaded(path):
    """The candidate's module and a ModelNew of it on the GPU, with its own kernels' names."""
    spec = importlib.util.spec_from_file_location(f"share_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = module.ModelNew(1024).cuda()
    return model, _own_kernel_names(module, path.read_text())


def test_the_examples_profiled_backward_is_its_own_kernels():
    model, names = _loaded(EXAMPLE / "triton_candidate.py")
    assert {"_layernorm_forward", "_layernorm_backward", "_sum_groups"} <= names
    inputs = [torch.randn(512, 1024, device="cuda")]
    share = training_step_share(model, names, inputs, seed=11, launches=None)
    assert "error" not in share, share
    assert share["profiled_steps"] == 1 and share["own_share"] > 0
    backward = share["backward"]
    assert backward["kernels"]["_layernorm_backward"]["own"], backward
    assert unrecorded_training_note(share) is None and no_own_backward(share) is None
    print(share)


def test_a_backward_of_torchs_autograd_shows_no_own_kernel_and_the_profile_stands():
    model, names = _loaded(TORCH_BACKWARD)
    share = training_step_share(model, names, [torch.randn(512, 1024, device="cuda")],
                                seed=11, launches=lambda: 0)
    assert share["profiled_steps"] == 3  # profiled again before it stands
    assert share["own_share"] > 0  # its forward's kernel
    assert share["backward"]["own_us"] == 0 and share["backward"]["kernels"], share
    assert unrecorded_training_note(share) is None
    assert "none of the candidate's kernels run during the backward" in no_own_backward(share)


def test_the_layernorm_examples_note_gives_the_training_steps_share_and_backward_kernels():
    judge = Judge(load_task(str(EXAMPLE / "task.py")), EvalConfig(vary_shapes=False))
    verdict = judge.evaluate(load_candidate(EXAMPLE / "triton_candidate.py"))
    assert verdict.reason == "passed", f"{verdict.message}\n{verdict.logs[-2000:]}"
    note = next(n for n in verdict.notes if n.startswith("own kernels: "))
    found = re.search(r"\(training step: (\d+)%\)", note)
    assert found and int(found.group(1)) > 0, note
    backward = note.split("; backward: ", 1)[1]
    assert "_layernorm_backward* " in backward, note
    print(note)


# A CUDA forward built without a function list (its own PYBIND11_MODULE), so the
# kernel switch cannot knock it out, and a backward of PyTorch's elementwise ops and
# sums: no launch count and no knockout sees that the backward has no kernel of its own.
CUDA_FORWARD_TORCH_BACKWARD = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = """
#include <vector>
std::vector<torch::Tensor> ln_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b,
                                      double eps);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("ln_forward", &ln_forward); }
"""

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <vector>

__device__ float block_sum(float value, float* partial) {
    partial[threadIdx.x] = value;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    float total = partial[0];
    __syncthreads();
    return total;
}

__global__ void ln_rows(const float* __restrict__ x, const float* __restrict__ w,
                        const float* __restrict__ b, float* __restrict__ y,
                        float* __restrict__ mean_out, float* __restrict__ rstd_out,
                        int64_t n_cols, float eps) {
    extern __shared__ float partial[];
    const float* row = x + (int64_t)blockIdx.x * n_cols;
    float sum = 0.f;
    for (int64_t c = threadIdx.x; c < n_cols; c += blockDim.x) sum += row[c];
    const float mean = block_sum(sum, partial) / n_cols;
    float squares = 0.f;
    for (int64_t c = threadIdx.x; c < n_cols; c += blockDim.x) {
        float d = row[c] - mean;
        squares += d * d;
    }
    const float rstd = rsqrtf(block_sum(squares, partial) / n_cols + eps);
    float* out = y + (int64_t)blockIdx.x * n_cols;
    for (int64_t c = threadIdx.x; c < n_cols; c += blockDim.x)
        out[c] = (row[c] - mean) * rstd * w[c] + b[c];
    if (threadIdx.x == 0) {
        mean_out[blockIdx.x] = mean;
        rstd_out[blockIdx.x] = rstd;
    }
}

std::vector<torch::Tensor> ln_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b,
                                      double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA input");
    auto xc = x.contiguous();
    const int64_t n_cols = xc.size(-1);
    const int64_t n_rows = xc.numel() / n_cols;
    auto y = torch::empty_like(xc);
    auto mean = torch::empty({n_rows}, xc.options());
    auto rstd = torch::empty({n_rows}, xc.options());
    const int threads = 256;
    ln_rows<<<n_rows, threads, threads * sizeof(float), at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), w.contiguous().data_ptr<float>(), b.contiguous().data_ptr<float>(),
        y.data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(), n_cols, (float)eps);
    return {y, mean, rstd};
}
"""

_ext = load_inline(name="share_ln_torch_backward", cpp_sources=CPP_SOURCE,
                   cuda_sources=CUDA_SOURCE, functions=None, verbose=False)


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = _ext.ln_forward(x, weight, bias, eps)
        ctx.save_for_backward(x.contiguous().view(-1, x.shape[-1]), weight, mean, rstd)
        ctx.shape = x.shape
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        dy = dy.contiguous().view(x.shape)
        xhat = (x - mean[:, None]) * rstd[:, None]
        wdy = dy * weight
        c_xhat = (xhat * wdy).mean(dim=1, keepdim=True)
        c_mean = wdy.mean(dim=1, keepdim=True)
        dx = (wdy - (xhat * c_xhat + c_mean)) * rstd[:, None]
        return dx.view(ctx.shape), (dy * xhat).sum(dim=0), dy.sum(dim=0), None


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=dim)
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.5)
            self.ln.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _LayerNorm.apply(x, self.ln.weight, self.ln.bias, self.ln.eps)
'''


def test_a_cuda_forward_with_a_backward_of_pytorchs_ops_is_a_ghost_backward(tmp_path):
    path = write(tmp_path, "cuda_forward_torch_backward.py", CUDA_FORWARD_TORCH_BACKWARD)
    judge = Judge(load_task(str(EXAMPLE / "task.py")), EvalConfig(vary_shapes=False))
    verdict = judge.evaluate(load_candidate(path))
    assert verdict.reason == "ghost_backward", f"{verdict.message}\n{verdict.logs[-2000:]}"
    assert "during the backward of 3 profiled training step(s)" in verdict.message
    print(verdict.message)
