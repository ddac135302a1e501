"""The zero-token tuner: find a kernel's numeric knobs and propose neighbouring values.

No LLM is involved. A variant differs from its parent only in a few integer
literals (block sizes, warps, stages, tiles, threads per block), edited in
place, so the evaluator alone decides whether it is correct and faster.
"""

from __future__ import annotations

import ast
import random
import re
from collections import Counter
from collections.abc import Iterator

from kernelevo.errors import CandidateError, ConfigError
from kernelevo.parsing import parse_source
from kernelevo.propose.knobs import MAX_THREADS_PER_BLOCK, Knob, Link, Positions, unique_knobs
from kernelevo.propose.tuner_cuda import cuda_block_sizes, cuda_knobs

KINDS = ("block", "num_warps", "num_stages", "tile", "threads", "launch")
_ATTEMPTS_PER_VARIANT = 25  # random picks repeat; this bounds the search without looping forever


def find_knobs(source: str, backend: str) -> list[Knob]:
    """Every tunable integer literal of a candidate, in source order."""
    if backend == "triton":
        return _triton_knobs(source)
    if backend == "cuda":
        return cuda_knobs(source)
    if backend == "pytorch":
        return []
    raise CandidateError(f"unknown backend {backend!r}: use triton, cuda or pytorch")


def knob_labels(knobs: list[Knob]) -> list[str]:
    """A unique label per knob: its name, with the line (and a count) where names repeat."""
    name_counts = Counter(knob.name for knob in knobs)
    seen: Counter[str] = Counter()
    labels = []
    for knob in knobs:
        base = knob.name if name_counts[knob.name] == 1 else f"{knob.name}@{knob.line}"
        seen[base] += 1
        labels.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return labels


def propose_variants(
    source: str,
    backend: str,
    rng: random.Random,
    count: int = 4,
    max_knobs_changed: int = 2,
) -> list[tuple[str, dict[str, tuple[int, int]]]]:
    """Up to `count` distinct variants, each moving 1..max_knobs_changed knobs one step."""
    if max_knobs_changed < 1:
        raise ConfigError(f"max_knobs_changed is {max_knobs_changed}: it must be at least 1")
    knobs = find_knobs(source, backend)
    choices = [
        (knob, label, options)
        for knob, label in zip(knobs, knob_labels(knobs))
        if (options := neighbours(knob, backend))
    ]
    variants: list[tuple[str, dict[str, tuple[int, int]]]] = []
    seen = {source}
    for _ in range(count * _ATTEMPTS_PER_VARIANT):
        if len(variants) >= count or not choices:
            break
        picked = rng.sample(choices, rng.randint(1, min(max_knobs_changed, len(choices))))
        moves = sorted(((knob, label, rng.choice(opts)) for knob, label, opts in picked),
                       key=lambda move: move[0].start)
        new_source = _splice(source, moves)
        if new_source is None or new_source in seen or not _acceptable(new_source, backend):
            continue
        seen.add(new_source)
        variants.append((new_source, {label: (knob.value, new) for knob, label, new in moves}))
    return variants


def describe_change(changes: dict[str, tuple[int, int]]) -> str:
    """A one-line summary such as "BLOCK_SIZE 1024->2048, num_warps 4->8"."""
    return ", ".join(f"{name} {old}->{new}" for name, (old, new) in changes.items())


def neighbours(knob: Knob, backend: str) -> list[int]:
    """The legal values one step away from the knob's current value."""
    value = knob.value
    low, high = _legal_range(knob, backend)
    # A knob its author set outside our range may stay there, but never moves further out.
    low, high = min(low, value), max(high, value)
    if knob.kind == "num_stages":
        options = [value - 1, value + 1]
    elif backend == "triton":
        # tl.arange needs powers of two, so odd values snap to the nearest ones.
        options = [_power_of_two_below(value), 1 << value.bit_length()]
    else:
        options = [value * 2] + ([value // 2] if value % 2 == 0 else [])
    legal = {option for option in options if low <= option <= high and option >= 1}
    if knob.kind == "threads":
        legal = {option for option in legal if option % 32 == 0}  # whole warps only
    return sorted(legal - {value})


# Ranges of sensible values, per backend and kind, as (lowest, highest).
_TRITON_RANGES = {
    "block": (16, 8192), "tile": (16, 256), "num_warps": (1, 16), "num_stages": (1, 6),
}
_CUDA_RANGES = {"threads": (32, 1024), "tile": (1, 256), "num_warps": (1, 32), "launch": (1, 1024)}
_MATMUL_DIMENSION = re.compile(r"_[MNK]$")


def _legal_range(knob: Knob, backend: str) -> tuple[int, int]:
    if backend == "triton" and knob.name.upper().startswith("GROUP"):
        return 1, 64  # grouped launch ordering, not a tile: small counts only
    if backend == "triton" and knob.kind == "block" and _MATMUL_DIMENSION.search(knob.name):
        return 16, 256  # tl.dot tiles: below 16 fails to compile, above 256 spills
    ranges = _TRITON_RANGES if backend == "triton" else _CUDA_RANGES
    return ranges.get(knob.kind, (1, MAX_THREADS_PER_BLOCK))


def _power_of_two_below(value: int) -> int:
    return 1 << ((value - 1).bit_length() - 1) if value > 1 else 0


def _splice(source: str, moves: list[tuple[Knob, str, int]]) -> str | None:
    """The source with each moved knob (and its linked literals) rewritten; None on overlap."""
    edits = []
    for knob, _, new in moves:
        edits.append((knob.start, knob.end, str(new)))
        edits += [(start, end, str(new + delta)) for start, end, delta in knob.linked]
    edits.sort()
    if any(left[1] > right[0] for left, right in zip(edits, edits[1:])):
        return None
    for start, end, text in reversed(edits):
        source = source[:start] + text + source[end:]
    return source


def _acceptable(source: str, backend: str) -> bool:
    try:
        parse_source(source)
    except SyntaxError:
        return False
    if backend == "cuda":
        return all(1 <= size <= MAX_THREADS_PER_BLOCK for size in cuda_block_sizes(source))
    return True


# ---- Triton: the Python AST ----------------------------------------------------------

_SIZE_NAME = re.compile(r"BLOCK|TILE|GROUP_SIZE")
_ALL_CAPS = re.compile(r"^[A-Z][A-Z0-9_]*$")
_PIPELINE = ("num_warps", "num_stages")


def _triton_knobs(source: str) -> list[Knob]:
    try:
        tree = parse_source(source)
    except SyntaxError:
        return []  # nothing to tune in a file that does not parse
    positions = Positions(source)
    constexprs, kernels = _jit_signatures(tree)
    knobs: list[Knob] = []
    references: dict[str, tuple[str, str]] = {}  # variable -> (kind, parameter it feeds)
    for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
        for name, value in _tuning_arguments(call, kernels):
            kind = _triton_kind(name, constexprs)
            if kind is None:
                continue
            number = _int_value(value)
            if number is not None and _plausible(name, number):
                sizes = kind in ("block", "tile")
                links = _grid_links(call, number, positions, tree) if sizes else ()
                knobs.append(_knob_at(positions, value, number, kind, name, links))
            elif isinstance(value, (ast.Name, ast.Attribute)):
                references.setdefault(_target_name(value), (kind, name))
    return unique_knobs(knobs + _triton_constants(tree, positions, references))


def _jit_signatures(tree: ast.AST) -> tuple[set[str], dict[str, list[str]]]:
    """Names of tl.constexpr parameters, and each kernel's positional parameter names."""
    constexprs: set[str] = set()
    kernels: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        params = node.args.posonlyargs + node.args.args
        every = params + node.args.kwonlyargs
        marked = {a.arg for a in every if _target_name(a.annotation) == "constexpr"}
        if marked:
            constexprs |= marked
            kernels[node.name] = [a.arg for a in params]
    return constexprs, kernels


def _tuning_arguments(call: ast.Call, kernels: dict[str, list[str]]) -> list[tuple[str, ast.expr]]:
    """(parameter, value) pairs a call passes: keywords, kernel positionals, Config dicts."""
    pairs = [(kw.arg, kw.value) for kw in call.keywords if kw.arg]
    kernel = call.func.value if isinstance(call.func, ast.Subscript) else None
    if isinstance(kernel, ast.Name) and kernel.id in kernels:
        for param, arg in zip(kernels[kernel.id], call.args):
            if isinstance(arg, ast.Starred):
                break  # positions are unknown after *args
            pairs.append((param, arg))
    config = call.args[0] if call.args else None
    if _target_name(call.func) == "Config" and isinstance(config, ast.Dict):
        pairs += [
            (key.value, value)
            for key, value in zip(config.keys, config.values)
            if isinstance(key, ast.Constant) and isinstance(key.value, str)
        ]
    return pairs


def _triton_kind(name: str, constexprs: set[str]) -> str | None:
    if name in _PIPELINE:
        return name
    if not _ALL_CAPS.match(name) or not (_SIZE_NAME.search(name) or name in constexprs):
        return None
    return "tile" if "TILE" in name else "block"


def _plausible(name: str, value: int) -> bool:
    """Whether a value looks like a size; other constexprs are often flags or modes."""
    if name in _PIPELINE or _SIZE_NAME.search(name):
        return value >= 1
    return value >= 2 and value & (value - 1) == 0


def _grid_links(
    call: ast.Call, value: int, positions: Positions, tree: ast.AST
) -> tuple[Link, ...]:
    """Literals in `kernel[grid]` that repeat the block size, as in cdiv(n, 1024).

    A grid named by a variable (`grid = (cdiv(n, 1024),)`) is followed to the
    assignments of that name, so the grid keeps covering the tensor.
    """
    if not isinstance(call.func, ast.Subscript):
        return ()
    grids = [call.func.slice]
    if isinstance(call.func.slice, ast.Name):
        name = call.func.slice.id
        grids += [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ]
    return tuple(
        (*_span(positions, node), number - value)
        for grid in grids
        for node in ast.walk(grid)
        if isinstance(node, ast.Constant) and (number := _int_value(node)) is not None
        and number in (value, value - 1)
    )


def _triton_constants(
    tree: ast.AST, positions: Positions, references: dict[str, tuple[str, str]]
) -> list[Knob]:
    """Integer assignments that feed a tuning parameter, or are ALL_CAPS block sizes."""
    knobs = []
    for node in ast.walk(tree):
        for target, value, number in _constant_assignments(node):
            name = _target_name(target)
            kind, parameter = references.get(name) or (_triton_kind(name, set()), name)
            if kind and _plausible(parameter, number):
                knobs.append(_knob_at(positions, value, number, kind, name))
    return knobs


def _constant_assignments(node: ast.AST) -> Iterator[tuple[ast.expr, ast.expr, int]]:
    """(target, literal, its value) of each int assigned by name or attribute."""
    pairs: list[tuple[ast.expr, ast.expr]]
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        pairs = [(node.target, node.value)]
    elif isinstance(node, ast.Assign):  # not any node with targets: `del x` has no value
        pairs = [(target, node.value) for target in node.targets]
    else:
        pairs = []
    while pairs:
        target, value = pairs.pop(0)
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
                and len(target.elts) == len(value.elts):
            pairs += zip(target.elts, value.elts)  # BLOCK_M, BLOCK_N = 128, 64
        elif isinstance(target, (ast.Name, ast.Attribute)) \
                and (number := _int_value(value)) is not None:
            yield target, value, number


def _int_value(node: ast.AST) -> int | None:
    """The value of an int literal, else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:  # bools are flags
        return node.value
    return None


def _target_name(node: ast.expr | None) -> str:
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")


def _span(positions: Positions, node: ast.expr) -> tuple[int, int]:
    start = positions.from_bytes(node.lineno, node.col_offset)
    return start, positions.from_bytes(node.end_lineno or node.lineno, node.end_col_offset or 0)


def _knob_at(positions: Positions, node: ast.expr, value: int, kind: str, name: str,
             linked: tuple[Link, ...] = ()) -> Knob:
    start, end = _span(positions, node)
    return Knob(kind, name, value, start, end, node.lineno, linked)
