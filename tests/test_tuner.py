"""The zero-token tuner: knobs found in Triton and CUDA candidates, and their variants."""

import ast
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelevo.errors import CandidateError, ConfigError
from kernelevo.propose.tuner import (
    Knob,
    describe_change,
    find_knobs,
    knob_labels,
    neighbours,
    propose_variants,
)

ROOT_FIXTURES = Path(__file__).parent / "fixtures" / "candidates"

TRITON_ELEMENTWISE = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n_elements = out.numel()
        grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
        add_relu_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=1024, num_warps=4)
        return out
'''

TRITON_MATMUL = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr, ACTIVATION: tl.constexpr):
    pid = tl.program_id(0)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)


class ModelNew(nn.Module):
    def forward(self, a, b):
        M, K = a.shape
        _, N = b.shape
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        matmul_kernel[grid](
            a, b, c, M, N, K,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            BLOCK_M=128, BLOCK_N=64, BLOCK_K=32, GROUP_SIZE_M=8, ACTIVATION=0,
            num_warps=8, num_stages=3,
        )
        return c
'''

TRITON_AUTOTUNE = '''\
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 256}, num_warps=2),
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4, num_stages=2),
    ],
    key=["n_elements"],
)
@triton.jit
def scale_kernel(x_ptr, out_ptr, n_elements, scale, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * scale, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''

TRITON_MODULE_CONSTANT = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 2048  # one definition, used by both launches below
NUM_WARPS = 8


@triton.jit
def square_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * x, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, BLOCK_SIZE),)
        square_kernel[grid](x, out, n, BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS)
        square_kernel[grid](out, out, n, BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS)
        return out
'''

TRITON_GRID_LITERAL = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def negate_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, -tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        negate_kernel[(triton.cdiv(x.numel(), 512),)](x, out, x.numel(), 512)
        return out
'''

CUDA_DEFINE = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#define BLOCK 256
#define WARP_SIZE 32

__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    int blocks = (n + BLOCK - 1) / BLOCK;
    relu_kernel<<<blocks, BLOCK>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"
relu = load_inline(name="relu", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["relu_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return relu.relu_cuda(x)
'''

CUDA_LITERAL_LAUNCH = '''\
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>

__global__ void scale_kernel(const float* x, float* y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s;
}

__global__ void add_kernel(const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] += x[i];
}

torch::Tensor scale_add(torch::Tensor x, float s) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), s, n);
    const int threads = 512;
    add_kernel<<<1024, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="scale_add", cpp_sources="", cuda_sources=cuda_source)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.scale_add(x, 2.0)
'''

CUDA_TILED = '''\
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
constexpr int TILE = 32;

__global__ void matmul_kernel(const float* A, const float* B, float* C, int N) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    // tiles of TILE x TILE, one thread per output element
}

__global__ void transpose_kernel(const float* x, float* y, int rows, int cols) {}

torch::Tensor matmul(torch::Tensor a, torch::Tensor b) {
    int n = a.size(0);
    auto c = torch::zeros_like(a);
    dim3 block(TILE, TILE);
    dim3 grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    float* out = c.data_ptr<float>();
    matmul_kernel<<<grid, block>>>(a.data_ptr<float>(), b.data_ptr<float>(), out, n);
    dim3 threads2d(16, 16);
    dim3 blocks2d((n + 15) / 16, (n + 15) / 16);
    transpose_kernel<<<blocks2d, threads2d>>>(c.data_ptr<float>(), c.data_ptr<float>(), n, n);
    return c;
}
"""
ext = load_inline(name="tiled", cpp_sources="", cuda_sources=cuda_source)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.matmul(a, b)
'''

PLAIN_PYTORCH = '''\
import torch
import torch.nn as nn

batch_size = 128
HIDDEN = 4096


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(HIDDEN, 1024)

    def forward(self, x):
        return torch.relu(self.linear(x)).sum(dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, HIDDEN)]
'''

ALL_SOURCES = [
    (TRITON_ELEMENTWISE, "triton"),
    (TRITON_MATMUL, "triton"),
    (TRITON_AUTOTUNE, "triton"),
    (TRITON_MODULE_CONSTANT, "triton"),
    (TRITON_GRID_LITERAL, "triton"),
    (CUDA_DEFINE, "cuda"),
    (CUDA_LITERAL_LAUNCH, "cuda"),
    (CUDA_TILED, "cuda"),
]
SOURCE_IDS = ["elementwise", "matmul", "autotune", "constant", "grid", "define", "literal", "tiled"]


def summary(knobs: list[Knob]) -> list[tuple[str, str, int]]:
    return [(knob.kind, knob.name, knob.value) for knob in knobs]


def line_of_text(source: str, text: str) -> int:
    return source[: source.index(text)].count("\n") + 1


def many_variants(source: str, backend: str, seeds: int = 30, **options):
    for seed in range(seeds):
        yield from propose_variants(source, backend, random.Random(seed), count=6, **options)


@pytest.mark.parametrize(("source", "backend"), ALL_SOURCES, ids=SOURCE_IDS)
def test_every_offset_points_at_its_literal(source, backend):
    knobs = find_knobs(source, backend)
    assert knobs
    for knob in knobs:
        assert source[knob.start : knob.end] == str(knob.value)
        assert source[: knob.start].count("\n") + 1 == knob.line
        assert not source[knob.end].isdigit() and not source[knob.start - 1].isdigit()


def test_elementwise_launch_keywords():
    knobs = find_knobs(TRITON_ELEMENTWISE, "triton")
    assert summary(knobs) == [("block", "BLOCK_SIZE", 1024), ("num_warps", "num_warps", 4)]
    assert {knob.line for knob in knobs} == {line_of_text(TRITON_ELEMENTWISE, "BLOCK_SIZE=1024")}


def test_matmul_blocks_and_pipeline_but_not_flags():
    assert summary(find_knobs(TRITON_MATMUL, "triton")) == [
        ("block", "BLOCK_M", 128),
        ("block", "BLOCK_N", 64),
        ("block", "BLOCK_K", 32),
        ("block", "GROUP_SIZE_M", 8),
        ("num_warps", "num_warps", 8),
        ("num_stages", "num_stages", 3),
    ]


def test_autotune_configs_each_knob_gets_a_label():
    knobs = find_knobs(TRITON_AUTOTUNE, "triton")
    assert [knob.value for knob in knobs] == [256, 2, 1024, 4, 2]
    labels = knob_labels(knobs)
    assert len(set(labels)) == len(labels)
    assert labels[-1] == "num_stages"
    assert labels[0] == f"BLOCK_SIZE@{line_of_text(TRITON_AUTOTUNE, '256')}"


def test_a_del_statement_is_no_assignment():
    # `del x` has targets but no value: the search for knobs passes over it
    source = TRITON_ELEMENTWISE.replace("        return out\n",
                                        "        del grid\n        return out\n")
    assert "del grid" in source
    assert summary(find_knobs(source, "triton")) == summary(find_knobs(TRITON_ELEMENTWISE,
                                                                       "triton"))


def test_module_constant_changes_the_definition_only():
    knobs = find_knobs(TRITON_MODULE_CONSTANT, "triton")
    assert summary(knobs) == [("block", "BLOCK_SIZE", 2048), ("num_warps", "NUM_WARPS", 8)]
    definition_lines = {line_of_text(TRITON_MODULE_CONSTANT, "BLOCK_SIZE = 2048"),
                        line_of_text(TRITON_MODULE_CONSTANT, "NUM_WARPS = 8")}
    for new_source, _ in many_variants(TRITON_MODULE_CONSTANT, "triton", seeds=5):
        line_pairs = zip(TRITON_MODULE_CONSTANT.splitlines(), new_source.splitlines())
        changed = {number for number, (old, new) in enumerate(line_pairs, 1) if old != new}
        assert changed and changed <= definition_lines


def test_positional_constexpr_moves_with_the_grid_literal():
    (knob,) = find_knobs(TRITON_GRID_LITERAL, "triton")
    assert (knob.name, knob.value) == ("BLOCK", 512)
    variants = propose_variants(TRITON_GRID_LITERAL, "triton", random.Random(0), count=4)
    assert {changes["BLOCK"][1] for _, changes in variants} == {256, 1024}
    for new_source, changes in variants:
        new = changes["BLOCK"][1]
        assert f"triton.cdiv(x.numel(), {new}),)](x, out, x.numel(), {new})" in new_source


def test_cuda_define_used_as_block_is_threads():
    assert summary(find_knobs(CUDA_DEFINE, "cuda")) == [("threads", "BLOCK", 256)]


def test_cuda_literal_launch_moves_its_grid_arithmetic():
    knobs = find_knobs(CUDA_LITERAL_LAUNCH, "cuda")
    assert summary(knobs) == [("threads", "scale_kernel.threads", 256), ("threads", "threads", 512)]
    literal = knobs[0]
    assert [CUDA_LITERAL_LAUNCH[s:e] for s, e, _ in literal.linked] == ["255", "256"]
    for new_source, changes in many_variants(CUDA_LITERAL_LAUNCH, "cuda", seeds=5):
        if "scale_kernel.threads" in changes:
            new = changes["scale_kernel.threads"][1]
            assert f"<<<(n + {new - 1}) / {new}, {new}>>>" in new_source


def test_cuda_constexpr_tile_and_dim3_components():
    assert summary(find_knobs(CUDA_TILED, "cuda")) == [
        ("tile", "TILE", 32),
        ("launch", "threads2d.x", 16),
        ("launch", "threads2d.y", 16),
    ]


def test_cuda_inline_dim3_launch_is_bounded_by_its_product():
    source = (
        'cuda_source = """\n__global__ void k() {}\n'
        'void run() { k<<<64, dim3(32, 16)>>>(); }\n"""\n'
    )
    expected = [("launch", "k.block.x", 32), ("launch", "k.block.y", 16)]
    assert summary(find_knobs(source, "cuda")) == expected
    for new_source, changes in many_variants(source, "cuda", seeds=10):
        x, y = map(int, re.search(r"dim3\((\d+), (\d+)\)", new_source).groups())
        assert x * y <= 1024
        assert changes.get("k.block.x", (32, x))[1] == x


def test_class_constant_and_local_variable_feeding_launch_keywords():
    source = TRITON_ELEMENTWISE.replace(
        "    def forward(self, x, y):\n",
        "    BLOCK_SIZE: int = 512\n\n    def forward(self, x, y):\n        warps = 2\n",
    ).replace("BLOCK_SIZE=1024, num_warps=4", "BLOCK_SIZE=self.BLOCK_SIZE, num_warps=warps")
    assert summary(find_knobs(source, "triton")) == [
        ("block", "BLOCK_SIZE", 512),
        ("num_warps", "warps", 2),
    ]


@pytest.mark.parametrize("backend", ["triton", "cuda", "pytorch"])
def test_plain_pytorch_has_no_knobs(backend):
    assert find_knobs(PLAIN_PYTORCH, backend) == []
    assert propose_variants(PLAIN_PYTORCH, backend, random.Random(0)) == []


def mask_knobs(source: str, knobs: list[Knob]) -> str:
    """The source with every knob literal and linked literal replaced by a marker."""
    spans = [(k.start, k.end) for k in knobs] + [link[:2] for k in knobs for link in k.linked]
    for start, end in sorted(spans, reverse=True):
        source = source[:start] + "#" + source[end:]
    return source


@pytest.mark.parametrize(("source", "backend"), ALL_SOURCES, ids=SOURCE_IDS)
def test_variants_parse_and_report_exactly_what_changed(source, backend):
    old_knobs = find_knobs(source, backend)
    labels = knob_labels(old_knobs)
    for new_source, changes in many_variants(source, backend, seeds=10):
        ast.parse(new_source)
        new_knobs = find_knobs(new_source, backend)
        assert [k.name for k in new_knobs] == [k.name for k in old_knobs]
        assert mask_knobs(new_source, new_knobs) == mask_knobs(source, old_knobs)
        moved = {
            label: (old.value, new.value)
            for label, old, new in zip(labels, old_knobs, new_knobs)
            if old.value != new.value
        }
        assert moved == changes


@pytest.mark.parametrize(("source", "backend"), ALL_SOURCES, ids=SOURCE_IDS)
def test_same_seed_same_variants_and_never_a_duplicate(source, backend):
    first = propose_variants(source, backend, random.Random(7), count=6)
    assert first == propose_variants(source, backend, random.Random(7), count=6)
    sources = [new_source for new_source, _ in first]
    assert len(set(sources)) == len(sources)
    assert source not in sources


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_at_most_max_knobs_change(limit):
    variants = list(many_variants(TRITON_MATMUL, "triton", seeds=10, max_knobs_changed=limit))
    assert variants
    assert all(1 <= len(changes) <= limit for _, changes in variants)
    assert max(len(changes) for _, changes in variants) == limit


@pytest.mark.parametrize(("source", "backend"), ALL_SOURCES[:5], ids=SOURCE_IDS[:5])
def test_triton_values_stay_legal(source, backend):
    for _, changes in many_variants(source, backend):
        for label, (old, new) in changes.items():
            name = label.split("@")[0]
            if name == "num_stages":
                assert 1 <= new <= 6 and abs(new - old) == 1
            elif name.lower() == "num_warps":
                assert new in {1, 2, 4, 8, 16}
            else:
                assert new & (new - 1) == 0 and new in (old * 2, old // 2)


def test_cuda_threads_stay_whole_warps_and_blocks_within_limit():
    for source in (CUDA_DEFINE, CUDA_LITERAL_LAUNCH):
        for _, changes in many_variants(source, "cuda"):
            for old, new in changes.values():
                assert new % 32 == 0 and 32 <= new <= 1024 and new in (old * 2, old // 2)


def test_cuda_dim3_product_stays_within_limit():
    seen_tiles, seen_dims = set(), set()
    for new_source, _ in many_variants(CUDA_TILED, "cuda"):
        tile = int(re.search(r"constexpr int TILE = (\d+);", new_source).group(1))
        x, y = map(int, re.search(r"dim3 threads2d\((\d+), (\d+)\)", new_source).groups())
        assert tile * tile <= 1024 and x * y <= 1024
        seen_tiles.add(tile)
        seen_dims.add((x, y))
    assert seen_tiles == {16, 32}  # 64 * 64 threads would not launch
    assert (32, 32) in seen_dims


def test_neighbours_are_one_step_in_range():
    def knob(kind, name, value):
        return Knob(kind, name, value, 0, len(str(value)), 1)

    assert neighbours(knob("block", "BLOCK_SIZE", 1024), "triton") == [512, 2048]
    assert neighbours(knob("block", "BLOCK_SIZE", 8192), "triton") == [4096]
    assert neighbours(knob("block", "BLOCK_SIZE", 1000), "triton") == [512, 1024]
    assert neighbours(knob("block", "BLOCK_M", 256), "triton") == [128]
    assert neighbours(knob("num_warps", "num_warps", 16), "triton") == [8]
    assert neighbours(knob("num_stages", "num_stages", 1), "triton") == [2]
    assert neighbours(knob("threads", "threads", 96), "cuda") == [192]
    assert neighbours(knob("threads", "threads", 1024), "cuda") == [512]


def test_describe_change():
    changes = {"BLOCK_SIZE": (1024, 2048), "num_warps": (4, 8)}
    assert describe_change(changes) == "BLOCK_SIZE 1024->2048, num_warps 4->8"


def test_offsets_are_characters_even_after_non_ascii_text():
    source = TRITON_ELEMENTWISE.replace("import torch\n", "import torch  # fused ×2 — fast\n", 1)
    for knob in find_knobs(source, "triton"):
        assert source[knob.start : knob.end] == str(knob.value)


def test_bad_arguments_are_refused():
    with pytest.raises(CandidateError, match="backend"):
        find_knobs(TRITON_ELEMENTWISE, "opencl")
    with pytest.raises(ConfigError, match="max_knobs_changed"):
        propose_variants(TRITON_ELEMENTWISE, "triton", random.Random(0), max_knobs_changed=0)


def test_a_source_that_does_not_parse_has_no_knobs():
    assert find_knobs("def broken(:\n    BLOCK_SIZE = 1024\n", "triton") == []


RUN_UNDER_INTERPRETER = textwrap.dedent(
    """
    import importlib.util, os, sys
    os.environ["TRITON_INTERPRET"] = "1"  # set before triton is imported
    import torch
    spec = importlib.util.spec_from_file_location("variant", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    x, y = torch.randn(5000), torch.randn(5000)
    torch.testing.assert_close(module.ModelNew()(x, y), torch.relu(x + y))
    print("variant matches torch")
    """
)


def test_a_variant_runs_under_the_triton_interpreter(tmp_path):
    pytest.importorskip("triton")
    variants = propose_variants(TRITON_ELEMENTWISE, "triton", random.Random(3), count=4)
    new_source, changes = next(v for v in variants if "BLOCK_SIZE" in v[1])
    path = tmp_path / "variant.py"
    path.write_text(new_source)
    result = subprocess.run(
        [sys.executable, "-c", RUN_UNDER_INTERPRETER, str(path)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, f"{describe_change(changes)}\n{result.stderr[-3000:]}"
    assert "variant matches torch" in result.stdout


def test_grid_held_in_a_variable_moves_with_the_block_size():
    source = (ROOT_FIXTURES / "honest_add.py").read_text()
    variants = propose_variants(source, "triton", random.Random(0), count=2)
    assert variants
    for new_source, changes in variants:
        old, new = changes["BLOCK"]
        assert f"triton.cdiv(n, {new})" in new_source
        assert f"BLOCK={new}" in new_source
        assert f"triton.cdiv(n, {old})" not in new_source


def test_sizes_unpacked_from_a_tuple_are_knobs():
    source = (ROOT_FIXTURES.parents[2] / "examples/gemm_bias_relu/triton_candidate.py").read_text()
    assert "BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 32" in source
    knobs = summary(find_knobs(source, "triton"))
    assert [("block", "BLOCK_M", 128), ("block", "BLOCK_N", 128),
            ("block", "BLOCK_K", 32)] == knobs[:3]
    moved = {name for _, changes in many_variants(source, "triton", seeds=20) for name in changes}
    assert {"BLOCK_M", "BLOCK_N", "BLOCK_K"} <= moved
