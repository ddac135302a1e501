"""Behaviour descriptors: where a kernel sits in the space of designs.

The archive keeps the best candidate per cell, so a cell must separate
designs that optimise differently; otherwise one early winner crowds out
every idea that needs a few steps to pay off. The descriptors are read
statically from the source (regular expressions and the Python AST, no
compilation), so they cost microseconds and work for candidates that fail.
They approximate; a wrong bucket only puts a kernel in a neighbouring cell.

- backend (triton, cuda, pytorch): the backends have different failure
  modes and ceilings, and a good Triton kernel must not evict the only CUDA one.
- fusion ("0", "1", "2", "3+"): distinct kernels the forward launches, or
  defined kernels when no launch is visible; "0" means no custom kernel.
  Fewer launches means more fusion: one kernel keeps intermediates in
  registers, several pay a round trip through global memory each.
- matrix_units (bool): tl.dot, WMMA, mma.sync, wgmma or tcgen05 appear.
  Tensor cores change the attainable rate by an order of magnitude, and a
  first tensor-core version is often slower than a tuned scalar one.
- memory ("direct", "staged", "persistent"): how data reaches the compute.
  direct: each program loads its block once. staged: tiles are staged
  through shared memory (CUDA `__shared__`, async copies) or a Triton loop
  loads tiles while advancing pointers (the K loop of a GEMM, a reduction
  over chunks). persistent: a grid-stride loop, a fixed grid walking all
  tiles (Triton `range(pid, n, tl.num_programs(0))`, CUDA `gridDim * blockDim`).
  These are the main steps of kernel optimisation, each with its own tuning.
- block ("small" <= 128, "medium" <= 1024, "large" > 1024, "unknown"): the
  largest power-of-two literal given to a BLOCK/TILE-like constant in Triton,
  or the threads per block in CUDA. Block size trades occupancy against
  reuse; keeping both ends alive lets the tuner start from either.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kernelevo.candidate import detect_backend
from kernelevo.parsing import parse_source

Cell = tuple[str, str, bool, str, str]

FUSION_BUCKETS = ("0", "1", "2", "3+")
MEMORY_STRATEGIES = ("direct", "staged", "persistent")
BLOCK_BUCKETS = ("small", "medium", "large", "unknown")

_TRITON_DOT = re.compile(r"\b(?:tl|language)\.dot(?:_scaled)?\s*\(")
_CUDA_MATRIX = re.compile(r"\bwmma::|\bmma_sync\b|\bmma\.sync\b|\bwgmma\b|\btcgen05\b")
_CUDA_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_CUDA_KERNEL = re.compile(r"__global__\s+[^;{(]*?(\w+)\s*\(")
_CUDA_LAUNCH = re.compile(r"(\w+)\s*(?:<[^<>;]*>)?\s*<<<")
_CUDA_STAGED = re.compile(r"__shared__|\bcp\.async\b|__pipeline_memcpy_async|memcpy_async")
_CUDA_GRID_STRIDE = re.compile(
    r"gridDim\.[xyz]\s*\*\s*blockDim\.[xyz]|blockDim\.[xyz]\s*\*\s*gridDim\.[xyz]"
)
_CUDA_LAUNCH_THREADS = re.compile(r"<<<\s*[^,<>]+,\s*(\d+)\s*[,>]")
_CUDA_DIM3 = re.compile(
    r"dim3\s+\w*(?:block|thread)\w*\s*\(\s*(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?\s*\)", re.I
)
# NAME = 128, 'NAME': 128, NAME: tl.constexpr = 128, and C's #define NAME 128.
_SIZE_ASSIGNMENT = re.compile(
    r"\b([A-Za-z_]\w*)['\"]?\s*(?::\s*(?:tl\.)?constexpr\s*)?[:=]\s*(\d+)\b"
    r"|#define\s+(\w+)\s+(\d+)\b"
)
_BLOCK_COUNT = re.compile(r"num|grid|blocks|^n_")
_TRITON_LOOP_FALLBACK = re.compile(r"\bfor\s+\w+\s+in\s+(?:tl\.)?(?:static_)?range\(")
_TRITON_LAUNCH_FALLBACK = re.compile(r"\b(\w+)\s*\[[^\]]+\]\s*\(")
_TRITON_JIT_FALLBACK = re.compile(r"@(?:triton\.)?jit\b[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+(\w+)")


@dataclass(frozen=True)
class Descriptors:
    """The behaviour of one kernel source; `cell` is the archive's key."""

    backend: str
    fusion: str
    matrix_units: bool
    memory: str
    block: str

    @property
    def cell(self) -> Cell:
        return (self.backend, self.fusion, self.matrix_units, self.memory, self.block)


def describe(source: str, backend: str | None = None) -> Descriptors:
    """Descriptors of a candidate source; the backend is detected unless given."""
    backend = backend or detect_backend(source)
    if backend == "triton":
        kernels, memory = _triton_structure(source)
        matrix_units = bool(_TRITON_DOT.search(source))
        block = _block_bucket(_sizes(source, ("block", "tile")))
    elif backend == "cuda":
        kernels, memory = _cuda_structure(source)
        matrix_units = bool(_CUDA_MATRIX.search(source))
        block = _block_bucket(_cuda_threads(source))
    else:
        kernels, memory, matrix_units, block = 0, "direct", False, "unknown"
    return Descriptors(backend, _fusion_bucket(kernels), matrix_units, memory, block)


def cell_of(source: str, backend: str | None = None) -> Cell:
    return describe(source, backend).cell


def cell_from_json(value: list | tuple) -> Cell:
    """JSON turns the cell tuple into a list; make it hashable again."""
    backend, fusion, matrix_units, memory, block = value
    return (str(backend), str(fusion), bool(matrix_units), str(memory), str(block))


def _fusion_bucket(kernels: int) -> str:
    return FUSION_BUCKETS[min(kernels, 3)]


def _block_bucket(sizes: list[int]) -> str:
    powers = [size for size in sizes if size > 0 and size & (size - 1) == 0]
    if not powers:
        return "unknown"
    largest = max(powers)
    if largest <= 128:
        return "small"
    return "medium" if largest <= 1024 else "large"


def _sizes(source: str, name_parts: tuple[str, ...]) -> list[int]:
    """Integer literals bound to names such as BLOCK_SIZE, 'BLOCK_M' or TILE_K."""
    sizes = []
    for match in _SIZE_ASSIGNMENT.finditer(source):
        name = (match.group(1) or match.group(3)).lower()
        value = match.group(2) or match.group(4)
        # num_blocks, grid_block and friends count blocks; they are not block sizes.
        if any(part in name for part in name_parts) and not _BLOCK_COUNT.search(name):
            sizes.append(int(value))
    return sizes


# -- Triton ------------------------------------------------------------------


def _triton_structure(source: str) -> tuple[int, str]:
    """(kernels launched or defined, memory strategy) from the AST, else by regex."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return _triton_structure_by_regex(source)
    kernels = [
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and _is_jit(node)
    ]
    names = {kernel.name for kernel in kernels}
    launched = {
        node.func.value.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Subscript)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in names
    }
    strategies = {_triton_memory(kernel) for kernel in kernels}
    memory = next((m for m in ("persistent", "staged") if m in strategies), "direct")
    return len(launched) or len(kernels), memory


def _is_jit(function: ast.FunctionDef) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(target).split(".")[-1] == "jit":
            return True
    return False


def _triton_memory(kernel: ast.FunctionDef) -> str:
    strategy = "direct"
    for node in ast.walk(kernel):
        if isinstance(node, ast.For) and "num_programs" in ast.unparse(node.iter):
            return "persistent"
        if isinstance(node, (ast.For, ast.While)) and _loads_in(node.body):
            strategy = "staged"
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("advance"):
            strategy = "staged"
    return strategy


def _loads_in(body: list[ast.stmt]) -> bool:
    return any(
        isinstance(node, ast.Call) and ast.unparse(node.func).endswith(".load")
        for statement in body
        for node in ast.walk(statement)
    )


def _triton_structure_by_regex(source: str) -> tuple[int, str]:
    names = set(_TRITON_JIT_FALLBACK.findall(source))
    launched = {name for name in _TRITON_LAUNCH_FALLBACK.findall(source) if name in names}
    if re.search(r"range\([^)\n]*num_programs", source):
        memory = "persistent"
    elif _TRITON_LOOP_FALLBACK.search(source) and "tl.load" in source:
        memory = "staged"
    else:
        memory = "direct"
    return len(launched) or len(names), memory


# -- CUDA --------------------------------------------------------------------


def _cuda_structure(source: str) -> tuple[int, str]:
    code = _CUDA_LAUNCH_BOUNDS.sub("", source)
    defined = set(_CUDA_KERNEL.findall(code))
    launched = {name for name in _CUDA_LAUNCH.findall(code) if name in defined}
    if _CUDA_GRID_STRIDE.search(code):
        memory = "persistent"
    elif _CUDA_STAGED.search(code):
        memory = "staged"
    else:
        memory = "direct"
    return len(launched) or len(defined), memory


def _cuda_threads(source: str) -> list[int]:
    """Threads per block: launch literals, dim3 block shapes, BLOCK/THREADS constants."""
    threads = [int(value) for value in _CUDA_LAUNCH_THREADS.findall(source)]
    for match in _CUDA_DIM3.finditer(source):
        product = 1
        for value in match.groups():
            product *= int(value) if value else 1
        threads.append(product)
    return threads + _sizes(source, ("block", "thread"))
