"""Behaviour descriptors and the MAP-Elites archive with islands."""

from __future__ import annotations

import json
import random

import pytest

from kernelevo.search.archive import Archive, ArchiveEntry, Elite, select_inspirations
from kernelevo.search.descriptors import cell_from_json, cell_of, describe

TRITON_ELEMENTWISE = '''
import torch
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)

class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        for attempt in range(1):
            add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK_SIZE=1024)
        return out
'''

TRITON_MATMUL_TWO_KERNELS = '''
import torch
import triton
import triton.language as tl

@triton.jit
def relu(x):
    return tl.maximum(x, 0.0)

@triton.autotune(
    configs=[triton.Config({'BLOCK_M': 128, 'BLOCK_N': 64, 'BLOCK_K': 32}, num_warps=4)],
    key=['M', 'N', 'K'],
)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    a_ptrs = a_ptr + tl.arange(0, BLOCK_M)[:, None] * K + tl.arange(0, BLOCK_K)[None, :]
    b_ptrs = b_ptr + tl.arange(0, BLOCK_K)[:, None] * N + tl.arange(0, BLOCK_N)[None, :]
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    tl.store(c_ptr, relu(acc))

@triton.jit
def bias_kernel(c_ptr, bias_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(c_ptr + offsets, tl.load(c_ptr + offsets) + tl.load(bias_ptr + offsets))

class ModelNew(torch.nn.Module):
    def forward(self, a, b, bias):
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device)
        matmul_kernel[(1,)](a, b, c, a.shape[0], b.shape[1], a.shape[1])
        bias_kernel[(1,)](c, bias, c.numel(), BLOCK=64)
        return c
'''

TRITON_PERSISTENT = '''
import torch
import triton
import triton.language as tl

@triton.jit
def scale_kernel(x_ptr, out_ptr, num_tiles, XBLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for tile in range(pid, num_tiles, tl.num_programs(0)):
        offsets = tile * XBLOCK + tl.arange(0, XBLOCK)
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) * 2)

class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        scale_kernel[(132,)](x, out, x.numel() // 2048, XBLOCK=2048)
        return out
'''

CUDA_TILED = r'''
import torch
from torch.utils.cpp_extension import load_inline

source = """
#define TILE 16
__global__ void __launch_bounds__(256) tiled_kernel(const float* a, float* out, int n) {
    __shared__ float tile[TILE][TILE];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i];
}
torch::Tensor run(torch::Tensor a) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    tiled_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
module = load_inline(name="tiled", cpp_sources="", cuda_sources=source, functions=["run"])

class ModelNew(torch.nn.Module):
    def forward(self, a):
        return module.run(a)
'''

CUDA_GRID_STRIDE_WMMA = r'''
import torch
from torch.utils.cpp_extension import load_inline

source = """
#include <mma.h>
using namespace nvcuda;
__global__ void first(const float* a, float* out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        out[i] = a[i];
    }
}
template <typename T>
__global__ void second(const T* a, T* out, int n) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
}
torch::Tensor run(torch::Tensor a) {
    auto out = torch::empty_like(a);
    dim3 threads(64, 32);
    first<<<132, threads>>>(a.data_ptr<float>(), out.data_ptr<float>(), a.numel());
    second<float><<<132, threads>>>(a.data_ptr<float>(), out.data_ptr<float>(), a.numel());
    return out;
}
"""
module = load_inline(name="gs", cpp_sources="", cuda_sources=source, functions=["run"])

class ModelNew(torch.nn.Module):
    def forward(self, a):
        return module.run(a)
'''

PYTORCH = '''
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x @ x)
'''


# -- descriptors ---------------------------------------------------------------


def test_triton_elementwise_is_one_direct_medium_kernel() -> None:
    assert cell_of(TRITON_ELEMENTWISE) == ("triton", "1", False, "direct", "medium")


def test_triton_matmul_counts_launches_not_helpers() -> None:
    # relu is a jit helper called inside a kernel, not a launch: two kernels run.
    descriptors = describe(TRITON_MATMUL_TWO_KERNELS, "triton")
    assert descriptors.cell == ("triton", "2", True, "staged", "small")


def test_triton_grid_stride_loop_is_persistent_and_large() -> None:
    assert cell_of(TRITON_PERSISTENT) == ("triton", "1", False, "persistent", "large")


def test_triton_source_that_does_not_parse_still_gets_a_cell() -> None:
    broken = TRITON_MATMUL_TWO_KERNELS.replace("def forward(self, a, b, bias):", "def forward(self")
    descriptors = describe(broken, "triton")
    assert descriptors.backend == "triton"
    assert (descriptors.matrix_units, descriptors.memory) == (True, "staged")
    assert descriptors.fusion == "2"


def test_cuda_shared_memory_kernel_is_staged() -> None:
    assert cell_of(CUDA_TILED) == ("cuda", "1", False, "staged", "medium")


def test_cuda_grid_stride_and_wmma() -> None:
    assert cell_of(CUDA_GRID_STRIDE_WMMA) == ("cuda", "2", True, "persistent", "large")


def test_pytorch_has_no_custom_kernel() -> None:
    assert cell_of(PYTORCH) == ("pytorch", "0", False, "direct", "unknown")


def test_block_counts_are_not_block_sizes() -> None:
    source = TRITON_ELEMENTWISE.replace("BLOCK_SIZE=1024", "BLOCK_SIZE=BS").replace(
        "out = torch.empty_like(x)", "num_blocks = 4096\n        out = torch.empty_like(x)"
    )
    assert describe(source).block == "unknown"


def test_cell_survives_json() -> None:
    cell = cell_of(CUDA_TILED)
    assert cell_from_json(json.loads(json.dumps(cell))) == cell


# -- elites --------------------------------------------------------------------

CELL_A = ("triton", "1", False, "direct", "medium")
CELL_B = ("triton", "1", True, "staged", "small")


def test_elite_is_replaced_only_by_a_strictly_fitter_candidate() -> None:
    archive = Archive(num_islands=1, rng=random.Random(1), migration_interval=0)
    assert archive.add("c1", CELL_A, 1.5, 0)
    assert not archive.add("c2", CELL_A, 1.2, 0)
    assert not archive.add("c3", CELL_A, 1.5, 0)  # ties keep the incumbent
    assert archive.add("c4", CELL_A, 2.0, 0)
    assert archive.add("c5", CELL_B, 0.5, 0)
    assert [(e.candidate_id, e.fitness) for e in archive.elites()] == [("c4", 2.0), ("c5", 0.5)]
    assert archive.best().candidate_id == "c4"


def test_a_challenger_inside_the_elites_interval_is_a_tie_and_keeps_the_incumbent() -> None:
    archive = Archive(num_islands=1, rng=random.Random(1), migration_interval=0)
    assert archive.add("c1", CELL_A, 2.0, 0, fitness_high=2.3)  # a rerun may show up to 2.3x
    assert not archive.add("c2", CELL_A, 2.1, 0, fitness_high=2.4)  # 5 % faster: inside
    assert not archive.add("c3", CELL_A, 2.3, 0)  # at the high end: still a tie
    assert [e.candidate_id for e in archive.elites()] == ["c1"]
    assert archive.add("c4", CELL_A, 2.31, 0, fitness_high=2.6)  # above it: a new elite
    assert (archive.best().candidate_id, archive.best().to_beat) == ("c4", 2.6)
    assert not archive.add("c5", CELL_A, 2.5, 0)  # inside the new elite's interval


def test_without_an_interval_any_fitter_candidate_replaces_the_elite() -> None:
    archive = Archive(num_islands=1, rng=random.Random(1), migration_interval=0)
    assert archive.add("c1", CELL_A, 2.0, 0)
    assert archive.add("c2", CELL_A, 2.1, 0, fitness_high=2.4)  # c1 had no interval
    assert not archive.add("c3", CELL_A, 2.2, 0)
    # A high end below the fitness (rounded intervals) never lowers the bar.
    archive.add("c4", CELL_B, 1.5, 0, fitness_high=1.4999)
    assert archive.elites(0)[-1].to_beat == 1.5 and not archive.add("c5", CELL_B, 1.5, 0)


def test_migrants_carry_their_interval_and_tie_inside_the_incumbents() -> None:
    archive = Archive(num_islands=2, rng=random.Random(0), migration_interval=0)
    archive.add("steady", CELL_A, 2.0, 0, fitness_high=2.5)
    archive.add("noisy", CELL_A, 2.2, 1, fitness_high=3.0)
    moves = archive.migrate()
    # 2.2 is inside steady's [.., 2.5]; 2.0 is inside noisy's too: nothing moves.
    assert [(m.candidate_id, m.accepted) for m in moves] == [("steady", False), ("noisy", False)]
    archive.add("clear", CELL_A, 3.1, 1)
    moves = archive.migrate()
    assert ("clear", True) in [(m.candidate_id, m.accepted) for m in moves]
    assert archive.best(0).candidate_id == "clear"


def test_failures_never_displace_elites_but_are_counted() -> None:
    archive = Archive(num_islands=2, rng=random.Random(1), migration_interval=0)
    archive.add("c1", CELL_A, 0.8, 0)
    assert not archive.add("c2", CELL_A, None, 0)
    assert not archive.add("c3", CELL_B, None, 0)
    assert not archive.add("c4", CELL_B, float("nan"), 1)
    assert [e.candidate_id for e in archive.elites()] == ["c1"]
    assert archive.failures(0) == {CELL_A: 1, CELL_B: 1}
    assert archive.failures() == {CELL_A: 1, CELL_B: 2}
    assert archive.best(1) is None


def test_bad_island_is_refused() -> None:
    archive = Archive(num_islands=2, rng=random.Random(1))
    with pytest.raises(ValueError, match="island 2 out of range"):
        archive.add("c1", CELL_A, 1.0, 2)


def test_choose_island_is_round_robin() -> None:
    archive = Archive(num_islands=3, rng=random.Random(1))
    assert [archive.choose_island() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


# -- sampling ------------------------------------------------------------------


def filled_archive(seed: int, cells: int = 10, num_islands: int = 1) -> Archive:
    archive = Archive(num_islands, random.Random(seed), migration_interval=0, top_k=2)
    for index in range(cells):
        archive.add(f"c{index}", ("triton", str(index)), 1.0 + index, index % num_islands)
    return archive


def test_parent_sampling_is_deterministic_for_a_seed() -> None:
    first, second = filled_archive(seed=42), filled_archive(seed=42)
    picks = [first.sample_parent(0).candidate_id for _ in range(50)]
    assert picks == [second.sample_parent(0).candidate_id for _ in range(50)]
    other = filled_archive(seed=43)
    assert picks != [other.sample_parent(0).candidate_id for _ in range(50)]


def test_exploration_reaches_cells_outside_the_top() -> None:
    archive = filled_archive(seed=3)
    picks = [archive.sample_parent(0).candidate_id for _ in range(400)]
    top = {"c9", "c8"}
    exploit_share = sum(pick in top for pick in picks) / len(picks)
    assert 0.6 < exploit_share < 0.9  # 0.7 exploit + 0.3 * 2/10 explore
    assert set(picks) == {f"c{index}" for index in range(10)}


def test_pure_exploitation_stays_in_the_top_k() -> None:
    archive = filled_archive(seed=3)
    archive.exploit_probability = 1.0
    assert {archive.sample_parent(0).candidate_id for _ in range(100)} == {"c9", "c8"}


def test_empty_island_borrows_parents_and_empty_archive_has_none() -> None:
    assert Archive(num_islands=2, rng=random.Random(0)).sample_parent(0) is None
    archive = Archive(num_islands=2, rng=random.Random(0), migration_interval=0)
    archive.add("c1", CELL_A, 1.0, 1)
    assert archive.sample_parent(0).candidate_id == "c1"


def test_inspirations_are_diverse_and_lead_with_the_best() -> None:
    archive = filled_archive(seed=5, cells=10, num_islands=2)
    parent = archive.sample_parent(0)
    inspirations = archive.sample_inspirations(0, parent.candidate_id, k=4)
    ids = [elite.candidate_id for elite in inspirations]
    assert len(ids) == 4 and len(set(ids)) == 4 and parent.candidate_id not in ids
    assert parent.cell not in {elite.cell for elite in inspirations}
    own_ranked = [e.candidate_id for e in archive.elites(0) if e != parent]
    assert ids[:2] == own_ranked[:2]


def test_inspirations_can_come_from_other_islands() -> None:
    own = [Elite("a", ("x",), 3.0, 0, 1), Elite("b", ("y",), 2.0, 0, 2)]
    own.append(Elite("c", ("w",), 1.0, 0, 3))
    foreign = [Elite("z", ("z",), 5.0, 1, 4)]
    chosen = select_inspirations(own, foreign, 3, random.Random(0), foreign_probability=1.0)
    assert [elite.candidate_id for elite in chosen] == ["a", "b", "z"]  # the top half, then abroad
    chosen = select_inspirations(own, foreign, 3, random.Random(0), foreign_probability=0.0)
    assert [elite.candidate_id for elite in chosen] == ["a", "b", "c"]
    assert select_inspirations([], [], 3, random.Random(0), 0.5) == []


# -- migration -----------------------------------------------------------------


def test_migration_copies_each_best_one_hop_around_the_ring() -> None:
    archive = Archive(num_islands=3, rng=random.Random(0), migration_interval=0)
    archive.add("best0", ("cell", 0), 3.0, 0)
    archive.add("best1", ("cell", 1), 2.0, 1)
    archive.add("best2", ("cell", 2), 1.0, 2)
    archive.add("weak0", ("cell", 9), 0.1, 0)
    moves = archive.migrate()
    assert [(m.candidate_id, m.source_island, m.target_island) for m in moves] == [
        ("best0", 0, 1),
        ("best1", 1, 2),
        ("best2", 2, 0),
    ]
    assert {e.candidate_id for e in archive.elites(1)} == {"best1", "best0"}
    assert {e.candidate_id for e in archive.elites(2)} == {"best2", "best1"}  # not best0: one hop
    assert {e.candidate_id for e in archive.elites(0)} == {"best0", "weak0", "best2"}
    assert all(elite.island == 1 for elite in archive.elites(1))


def test_migrants_compete_for_cells_like_any_candidate() -> None:
    archive = Archive(num_islands=2, rng=random.Random(0), migration_interval=0)
    archive.add("strong", CELL_A, 5.0, 1)
    archive.add("weak", CELL_A, 1.0, 0)
    moves = archive.migrate()
    assert [(m.candidate_id, m.accepted) for m in moves] == [("weak", False), ("strong", True)]
    assert archive.best(0).candidate_id == "strong"


def test_migration_runs_every_interval_additions() -> None:
    archive = Archive(num_islands=2, rng=random.Random(0), migration_interval=3)
    archive.add("a", CELL_A, 1.0, 0)
    archive.add("b", CELL_B, None, 0)
    assert archive.elites(1) == []
    archive.add("c", CELL_B, 0.5, 1)  # the third addition triggers the migration
    assert {e.candidate_id for e in archive.elites(1)} == {"a", "c"}
    assert {m.candidate_id for m in archive.last_migration} == {"a", "c"}


# -- persistence ---------------------------------------------------------------


def random_entries(count: int, seed: int) -> list[ArchiveEntry]:
    """Failures and fitnesses, half of these with an interval up to 40 % wide."""
    rng = random.Random(seed)
    cells = [("triton", str(fusion), dot) for fusion in range(3) for dot in (False, True)]
    entries = []
    for index in range(count):
        fitness = None if rng.random() < 0.2 else round(rng.uniform(0.1, 5.0), 3)
        high = None if fitness is None or rng.random() < 0.5 else fitness * rng.uniform(1, 1.4)
        entries.append(ArchiveEntry(f"c{index:04d}", rng.choice(cells), fitness,
                                    rng.randrange(3), high))
    return entries


def test_rebuild_reproduces_the_live_archive() -> None:
    entries = random_entries(120, seed=11)
    settings = {"num_islands": 3, "migration_interval": 10, "migration_count": 2}
    live = Archive(rng=random.Random(1), **settings)
    for entry in entries:
        live.add(entry.candidate_id, entry.cell, entry.fitness, entry.island, entry.fitness_high)
        live.sample_parent(entry.island)  # sampling between additions must not matter
    rebuilt = Archive.rebuild(entries, rng=random.Random(99), **settings)
    for island in range(3):
        assert rebuilt.elites(island) == live.elites(island)
        assert rebuilt.failures(island) == live.failures(island)


def test_snapshot_restore_round_trip_continues_identically() -> None:
    archive = Archive(num_islands=3, rng=random.Random(7), migration_interval=10, top_k=2)
    for entry in random_entries(60, seed=4):
        archive.add(entry.candidate_id, entry.cell, entry.fitness, entry.island,
                    entry.fitness_high)
    archive.choose_island()
    data = json.loads(json.dumps(archive.snapshot()))
    restored = Archive.restore(data, random.Random())
    assert restored.snapshot() == data
    assert any(e.fitness_high is not None for e in restored.elites())
    assert [e.to_beat for e in restored.elites()] == [e.to_beat for e in archive.elites()]
    for island in range(3):
        assert restored.elites(island) == archive.elites(island)
        assert restored.failures(island) == archive.failures(island)
    assert restored.choose_island() == archive.choose_island()
    for island in (0, 1, 2, 0):
        assert restored.sample_parent(island) == archive.sample_parent(island)
        parent_id = archive.best(island).candidate_id
        assert restored.sample_inspirations(island, parent_id, 3) == archive.sample_inspirations(
            island, parent_id, 3
        )


def test_a_format_1_snapshot_restores_with_no_intervals() -> None:
    archive = Archive(num_islands=1, rng=random.Random(0), migration_interval=0)
    archive.add("c1", CELL_A, 2.0, 0, fitness_high=2.5)
    data = json.loads(json.dumps(archive.snapshot()))
    data["format"] = 1
    for elite in data["islands"][0]["elites"]:
        del elite["fitness_high"]
    restored = Archive.restore(data)
    assert restored.best().fitness_high is None
    assert restored.add("c2", CELL_A, 2.1, 0)  # beyond 2.0: the rule of an elite without one


def test_restore_refuses_unknown_formats() -> None:
    data = Archive(rng=random.Random(0)).snapshot()
    data["format"] = 99
    with pytest.raises(ValueError, match="format 99"):
        Archive.restore(data)


def test_last_migration_holds_only_the_latest_additions_moves() -> None:
    archive = Archive(num_islands=2, rng=random.Random(0), migration_interval=2)
    archive.add("a", CELL_A, 1.0, 0)
    archive.add("b", CELL_B, 2.0, 1)  # the second addition migrates
    assert archive.last_migration
    archive.add("c", CELL_A, 3.0, 0)  # no migration this time
    assert archive.last_migration == []
