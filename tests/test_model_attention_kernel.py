"""The example's attention kernel (examples/model_block/kernels/attn.py) at every tile choice.

The judge runs the kernel with the tiles its table picks for the task's
sizes; here each entry of the table (narrowed for a wide head as the table
narrows it) computes the block's attention at sizes with tails in both the
sequence and the head, and without, against the reference submodule at the
judge's tolerance: an entry that breaks masking fails here. Triton runs under
its interpreter, which multiplies in fp32 whatever tl.dot's input_precision.
"""

import importlib.util
import sys

import pytest
import torch
import torch.nn.functional as F
import triton

from kernelevo.config import DEFAULT_TOLERANCES
from kernelevo.evaluate.analysis.tolerance import compare_tensor
from tests.conftest import ROOT

KERNEL = ROOT / "examples/model_block/kernels/attn.py"
TASKS = ROOT / "examples/model_block/tasks"  # the model's copy the kernel imports
# (batch, seq_len, heads, head_dim): tails of the key and query blocks (37, 150), none
# (128, 64), a head narrower than its block (24), one the table narrows its tiles for (80)
# and one past the width where it shrinks the query block too (260).
SHAPES = [(2, 37, 2, 24), (1, 150, 2, 24), (1, 128, 2, 64), (1, 40, 2, 80), (1, 20, 1, 260)]


@pytest.fixture(scope="module")
def kernel():
    sys.path.insert(0, str(TASKS))
    try:
        spec = importlib.util.spec_from_file_location("_test_attention_kernel", KERNEL)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(TASKS))


def _block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


def _reference(kernel, heads: int, head_dim: int, dtype: torch.dtype) -> torch.nn.Module:
    """The block's Attention at this width, with weights drawn under a fixed seed."""
    attention_class = type(kernel.reference_submodule())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return attention_class(heads * head_dim, heads).eval().to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("entry", ["HALF_TILES", "HALF_TILES_SMALL_GRID", "FP32_TILES"])
def test_every_table_entry_matches_the_reference_attention(kernel, entry, dtype):
    assert {getattr(kernel, name) for name in
            ("HALF_TILES", "HALF_TILES_SMALL_GRID", "FP32_TILES")} == set(kernel.TILE_TABLE)
    atol, rtol = DEFAULT_TOLERANCES[str(dtype).removeprefix("torch.")]
    torch.manual_seed(1)
    for batch, seq_len, heads, head_dim in SHAPES:
        attention = _reference(kernel, heads, head_dim, dtype)
        tiles = kernel.fit_to_head(getattr(kernel, entry), _block_d(head_dim))
        x = torch.randn(batch, seq_len, heads * head_dim).to(dtype)
        with torch.no_grad():
            expected = attention(x)
            qkv = F.linear(x, attention.qkv.weight, attention.qkv.bias)
            core = kernel.attention_core(qkv, heads, attention.scale, tiles=tiles)
            got = F.linear(core, attention.proj.weight, attention.proj.bias)
        check = compare_tensor(got, expected, atol, rtol)
        assert check.reason is None, f"{tiles} at {(batch, seq_len, heads, head_dim)}: " \
                                     f"{check.message}"


def test_the_table_picks_by_dtype_grid_and_head(kernel):
    cpu = torch.device("cpu")  # off CUDA the grid rule assumes an H100's 132 SMs
    pick = kernel.choose_tiles
    # The accepted sizes: batch 4 x 1024 and batch 1 x 4096 tokens, 8 heads of 64.
    assert pick(torch.float16, 32, 1024, 64, cpu) == kernel.HALF_TILES  # 256 programs
    assert pick(torch.bfloat16, 8, 4096, 64, cpu) == kernel.HALF_TILES  # 256 programs
    assert pick(torch.float16, 8, 1024, 64, cpu) == kernel.HALF_TILES_SMALL_GRID  # 64
    assert pick(torch.float32, 32, 1024, 64, cpu) == kernel.FP32_TILES
    assert pick(torch.float32, 8, 4096, 64, cpu) == kernel.FP32_TILES
    for block_d in (16, 32, 64, 128, 256, 512):
        for entry in kernel.TILE_TABLE:
            tiles = kernel.fit_to_head(entry, block_d)
            assert min(tiles.block_m, tiles.block_n) >= 16  # tl.dot's least
            if block_d <= 64:
                assert tiles == entry
            elif block_d <= 256:  # k/v tiles of the head-64 entry's size, 64 queries
                assert tiles.block_n * block_d == entry.block_n * 64
                assert tiles.block_m == 64
            else:  # 16 keys, and the q tile stops growing
                assert tiles.block_n == 16 and tiles.block_m * block_d == 64 * 256
    assert kernel.dot_precision(torch.float32) == "tf32x3"
    assert kernel.dot_precision(torch.float16) == "tf32"  # ignored: not an fp32 operand


def test_the_kernel_refuses_a_scale_it_would_get_wrong(kernel):
    qkv = torch.randn(1, 8, 3 * 32)
    with pytest.raises(ValueError, match="positive"):
        kernel.attention_core(qkv, 2, -0.25)
