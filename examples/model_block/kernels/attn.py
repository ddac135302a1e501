"""The block's whole attention: the two projections by cuBLAS, the core as one fused Triton kernel.

The core is flash attention: each program holds a block of queries of one
(batch, head) and walks the keys block by block with an online softmax, so
the seq_len x seq_len scores never reach memory. It reads q, k and v in place
from the qkv projection's output and writes the heads already merged, so no
transpose is copied either. Tails of the sequence and of the head dimension
are masked: any batch, sequence length, head count and head size runs.

Both matmuls run on tensor cores at every dtype. Half types (fp16, bf16) are
native tensor-core inputs. fp32 uses Triton's "tf32x3" (3xTF32): each operand
x is split into big = x rounded to TF32 and small = x - big, and three TF32
products (small x big, big x small, big x big, accumulated in fp32) stand for
the fp32 one. Dropped are small x small (at most 2^-22 of the product) and
the bits of each small beyond TF32's (at most 2^-21 each), so a product is
good to about 2^-20 relative at worst, against 2^-24 for fp32 and 2^-10 for
plain TF32. The reference runs with TF32 off, and the judge holds fp32
outputs to 1e-4 (atol scaled by the output's rms, plus rtol, and a relative
L2 error of at most 1e-4). Emulated on the block's attention at 4 x 1024 and
1 x 4096 tokens (dim 512, 8 heads), plain TF32 misses it (relative L2 error
4-5e-4 against the fp32 reference) and tf32x3 meets it with about 500 times to
spare (1.5-1.9e-7, as close as fp32 itself is to fp64; largest difference
4e-8 where 1e-4 is allowed). The FMA dot ("ieee"), used before, was far
slower than eager's cuBLAS SGEMM. The Triton interpreter ignores
input_precision and multiplies in fp32, so CPU runs test the algorithm, not
this rounding.

Tiles come from a small fixed table (Tiles, choose_tiles), not from an
autotuning sweep: the first call and every timed call run the same kernel.
"""

from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

from _model_block_4f8ca4ffe2 import build as build_model  # the model's copy beside the tasks

LOG2_E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)); exp2 is the cheaper instruction
MIN_BLOCK = 16  # tl.dot needs at least 16 rows, columns and inner size
TUNED_HEAD = 64  # the head size the table's tiles are chosen for (head_dim 64: most models)
WARPGROUP_ROWS = 64  # rows of one Hopper warpgroup MMA (wgmma): fewer and Triton uses mma.sync
# fp32 matmuls on tensor cores at about fp32 accuracy (see above). ROCm's Triton has no
# tf32x3 (its fp32 choices are ieee, bf16x3 and bf16x6); there fp32 stays exact.
FP32_PRECISION = "ieee" if torch.version.hip else "tf32x3"
HALF_PRECISION = "tf32"  # Triton's default; it only affects fp32 operands, so none here
ASSUMED_MULTIPROCESSORS = 132  # an H100 SXM's SMs: the grid rule off CUDA (the interpreter)


class Tiles(NamedTuple):
    """Queries per program (block_m), keys per step (block_n) and the launch's warps and stages."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


# The register, shared-memory and spill figures below are ptxas's for Triton 3.6 compiling
# for sm_90 (H100) at head_dim 64; the H100 has 64K registers and 227 KiB of shared memory
# for one block (228 KiB per SM), and a thread may hold 255 registers.
#
# fp16/bf16, head_dim <= 64: 128 queries by 64 keys, 4 warps, 3 stages, the shape
# FlashAttention-2 and Triton's fused-attention tutorial use for this head size. A 128-row
# block reads each k/v tile for twice the queries of a 64-row one (half the L2 traffic),
# and its q @ k^T is two warpgroup MMAs sharing one k tile. 211 registers, no spills, 64 KiB:
# two blocks per SM. (8 warps would halve the registers, but the tutorial keeps 8 warps to
# 128 x 128 tiles and above.)
HALF_TILES = Tiles(128, 64, 4, 3)
# ...unless 128-query blocks leave SMs without a program: few (batch, head)s and a short
# sequence (batch 1 x 8 heads x 1024 tokens is 64 programs). Then 64-query blocks, twice
# the programs; 120 registers, 56 KiB, up to four blocks per SM. The accepted sizes
# (4 x 1024 and 1 x 4096 tokens, 8 heads) are 256 programs at 128 rows: HALF_TILES.
HALF_TILES_SMALL_GRID = Tiles(64, 64, 4, 3)
# fp32 through tf32x3: each operand is held three ways (as loaded, its TF32 part, its
# remainder) at twice a half type's bytes. 64 x 64 tiles at 2 stages: 255 registers, no
# spills, 96 KiB, two blocks per SM. 3 stages take 128 KiB (one block per SM); 128-query
# blocks spill (4 warps: 1.5 KiB a thread; 8 warps, 128 KiB: 32 bytes). 64 keys, not 32
# (80 KiB at 3 stages, also no spills): twice as wide an MMA for q @ k^T, and half the
# accumulator rescales per key. 512 programs at both accepted sizes. (The kernel before
# this one ran these tiles with the FMA dot, "ieee": no tensor cores, 1.4 KiB of spills.)
FP32_TILES = Tiles(64, 64, 4, 2)
TILE_TABLE = (HALF_TILES, HALF_TILES_SMALL_GRID, FP32_TILES)  # what choose_tiles starts from


def fit_to_head(tiles: Tiles, block_d: int) -> Tiles:
    """The tiles for a head wider than TUNED_HEAD: fewer keys per step, at most 64 queries.

    A k/v tile is block_n x block_d, so block_n shrinks as the head widens and
    a k/v tile keeps the bytes of the head_dim-64 entry (down to 16 keys, at a
    head of 256). Queries stay at 64 (a Hopper warpgroup MMA's rows; fewer
    fall back to the slower mma.sync) up to a head of 256, then halve as the
    head doubles, so q's tile stops growing too. Never below tl.dot's 16.
    (Triton 3.6 for sm_90 at head_dim 128 and 256: half types 64-80 KiB of
    shared memory, no spills; fp32 128-192 KiB and 1-3 KiB of spills a
    thread, the price of holding each operand three ways.)
    """
    if block_d <= TUNED_HEAD:
        return tiles
    widest_full_rows = 4 * TUNED_HEAD
    block_m = min(tiles.block_m, WARPGROUP_ROWS)
    if block_d > widest_full_rows:
        block_m = max(MIN_BLOCK, block_m * widest_full_rows // block_d)
    return tiles._replace(block_m=block_m,
                          block_n=max(MIN_BLOCK, tiles.block_n * TUNED_HEAD // block_d))


def choose_tiles(dtype: torch.dtype, batch_heads: int, seq_len: int, block_d: int,
                 device: torch.device) -> Tiles:
    """The table's tiles for this dtype, grid and head size (see the table's comments)."""
    if dtype in (torch.float16, torch.bfloat16):
        programs = triton.cdiv(seq_len, HALF_TILES.block_m) * batch_heads
        fills = programs >= _multiprocessors(device)
        tiles = HALF_TILES if fills else HALF_TILES_SMALL_GRID
    else:
        tiles = FP32_TILES
    return fit_to_head(tiles, block_d)


def _multiprocessors(device: torch.device) -> int:
    if device.type != "cuda":
        return ASSUMED_MULTIPROCESSORS
    return torch.cuda.get_device_properties(device).multi_processor_count


def dot_precision(dtype: torch.dtype) -> str:
    """tl.dot's input_precision: tf32x3 for fp32 (see above), exact for fp64."""
    if dtype == torch.float32:
        return FP32_PRECISION
    return "ieee" if dtype == torch.float64 else HALF_PRECISION


def reference_submodule() -> nn.Module:
    """The task's submodule, for its weights' shapes, head count and scale."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(42)
        model = build_model()[0]
    return model.eval().get_submodule("attn")


@triton.jit
def _load_tile(pointers, row_ok, col_ok, MASK_ROWS: tl.constexpr, MASK_COLS: tl.constexpr):
    # Masks only where a tail can be: a full key block of a head that fills BLOCK_D loads
    # unmasked, so nothing per element is spent on it.
    if MASK_ROWS:
        if MASK_COLS:
            tile = tl.load(pointers, mask=row_ok[:, None] & col_ok[None, :], other=0.0)
        else:
            tile = tl.load(pointers, mask=row_ok[:, None], other=0.0)
    else:
        if MASK_COLS:
            tile = tl.load(pointers, mask=col_ok[None, :], other=0.0)
        else:
            tile = tl.load(pointers)
    return tile


@triton.jit
def _attend_key_block(acc, running_max, running_sum, q, key_base, start, seq_len, row_stride,
                      dim, cols, col_ok, qk_scale_log2, BLOCK_N: tl.constexpr,
                      MASK_KEYS: tl.constexpr, MASK_COLS: tl.constexpr,
                      PRECISION: tl.constexpr):
    # One online-softmax step: the BLOCK_N keys from `start` folded into acc, max and sum.
    keys = start + tl.arange(0, BLOCK_N)
    key_ok = keys < seq_len
    offsets = keys[:, None] * row_stride + cols[None, :]
    k = _load_tile(key_base + offsets, key_ok, col_ok, MASK_KEYS, MASK_COLS)
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    if MASK_KEYS:
        scores = tl.where(key_ok[None, :], scores, float("-inf"))
    # The scale is positive, so the scaled max is the max scaled, and scaling, shifting by
    # the max and the exponent's base change are one multiply-add per score.
    # Every key block holds at least one real key, so the new max is finite.
    new_max = tl.maximum(running_max, tl.max(scores, axis=1) * qk_scale_log2)
    rescale = tl.exp2(running_max - new_max)
    weights = tl.exp2(scores * qk_scale_log2 - new_max[:, None])
    running_sum = running_sum * rescale + tl.sum(weights, axis=1)
    v = _load_tile(key_base + dim + offsets, key_ok, col_ok, MASK_KEYS, MASK_COLS)
    # The rescaled accumulator goes in as the dot's own, so the MMA adds onto it.
    acc = tl.dot(weights.to(v.dtype), v, acc * rescale[:, None], input_precision=PRECISION)
    return acc, new_max, running_sum


@triton.jit
def _attention_kernel(qkv_ptr, out_ptr, seq_len, heads, qk_scale_log2,
                      HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_D: tl.constexpr, PRECISION: tl.constexpr):
    # qkv is (batch, seq_len, 3, heads, head_dim) contiguous; out is (batch, seq_len, heads,
    # head_dim), which is the (batch, seq_len, dim) the output projection reads. The grid's
    # first axis is the query block, so neighbouring programs share one head's k and v in L2.
    MASK_COLS: tl.constexpr = HEAD_DIM != BLOCK_D
    query_block = tl.program_id(0)
    batch_head = tl.program_id(1)
    batch = (batch_head // heads).to(tl.int64)
    head = batch_head % heads
    dim = heads * HEAD_DIM
    row_stride = 3 * dim
    base = qkv_ptr + batch * seq_len * row_stride + head * HEAD_DIM

    rows = query_block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < seq_len
    col_ok = cols < HEAD_DIM
    q = _load_tile(base + rows[:, None] * row_stride + cols[None, :], row_ok, col_ok, True,
                   MASK_COLS)

    running_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
    running_sum = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # Whole key blocks without a key mask, then the tail (if any) with one.
    full_end = seq_len - seq_len % BLOCK_N
    for start in range(0, full_end, BLOCK_N):
        acc, running_max, running_sum = _attend_key_block(
            acc, running_max, running_sum, q, base + dim, start, seq_len, row_stride, dim,
            cols, col_ok, qk_scale_log2, BLOCK_N, False, MASK_COLS, PRECISION)
    if full_end < seq_len:
        acc, running_max, running_sum = _attend_key_block(
            acc, running_max, running_sum, q, base + dim, full_end, seq_len, row_stride, dim,
            cols, col_ok, qk_scale_log2, BLOCK_N, True, MASK_COLS, PRECISION)

    out = acc / running_sum[:, None]
    out_rows = out_ptr + batch * seq_len * dim + head * HEAD_DIM + rows[:, None] * dim
    tl.store(out_rows + cols[None, :], out.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])


def attention_core(qkv: torch.Tensor, heads: int, scale: float,
                   tiles: Tiles | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v of each head: (batch, seq, 3 * dim) in, (batch, seq, dim) out.

    `tiles` defaults to choose_tiles' pick; any Tiles computes the same result.
    """
    if scale <= 0:
        raise ValueError(f"the softmax scale must be positive, got {scale}")
    batch, seq_len, three_dim = qkv.shape
    dim = three_dim // 3
    head_dim = dim // heads
    block_d = max(MIN_BLOCK, triton.next_power_of_2(head_dim))
    if tiles is None:
        tiles = choose_tiles(qkv.dtype, batch * heads, seq_len, block_d, qkv.device)
    out = torch.empty((batch, seq_len, dim), device=qkv.device, dtype=qkv.dtype)
    grid = (triton.cdiv(seq_len, tiles.block_m), batch * heads)
    _attention_kernel[grid](qkv, out, seq_len, heads, scale * LOG2_E, HEAD_DIM=head_dim,
                            BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, BLOCK_D=block_d,
                            PRECISION=dot_precision(qkv.dtype), num_warps=tiles.num_warps,
                            num_stages=tiles.num_stages)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        attention = reference_submodule()
        self.heads = attention.heads
        self.scale = attention.scale
        # Named as the reference's, so `kernelevo model apply` hands over the model's own.
        self.qkv = nn.Linear(attention.qkv.in_features, attention.qkv.out_features)
        self.proj = nn.Linear(attention.proj.in_features, attention.proj.out_features)
        self.load_state_dict(attention.state_dict())

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        qkv = F.linear(x0, self.qkv.weight, self.qkv.bias).contiguous()  # free: already is
        return F.linear(attention_core(qkv, self.heads, self.scale), self.proj.weight,
                        self.proj.bias)
