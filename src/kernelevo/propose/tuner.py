"""The zero-token tuner: find a kernel's numeric knobs and propose neighbouring values.

No LLM is involved. A variant differs from its parent only in a few integer
literals (block sizes, warps, stages, tiles, threads per block), edited in
place, so the evaluator alone decides whether it is correct and faster.
"""

from __future__ import annotations

import ast
import bisect
import io
import math
import random
import re
import tokenize
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from kernelevo.errors import CandidateError, ConfigError
from kernelevo.parsing import parse_source

KINDS = ("block", "num_warps", "num_stages", "tile", "threads", "launch")
MAX_THREADS_PER_BLOCK = 1024  # the CUDA limit on every GPU since compute capability 2.0
_ATTEMPTS_PER_VARIANT = 25  # random picks repeat; this bounds the search without looping forever
_Link = tuple[int, int, int]  # (start, end, delta) of a literal that moves with a knob
_Segment = tuple[str, int]  # a CUDA string literal as written, and its offset in the source


@dataclass(frozen=True)
class Knob:
    """One integer literal that tunes a kernel; offsets are characters into the source."""

    kind: str
    name: str
    value: int
    start: int
    end: int
    line: int
    # Literals that must move with this one, as (start, end, delta): each becomes
    # new value + delta, e.g. the 255 and 256 of `<<<(n + 255) / 256, 256>>>`.
    linked: tuple[tuple[int, int, int], ...] = ()


def find_knobs(source: str, backend: str) -> list[Knob]:
    """Every tunable integer literal of a candidate, in source order."""
    if backend == "triton":
        return _triton_knobs(source)
    if backend == "cuda":
        return _cuda_knobs(source)
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
        return all(1 <= size <= MAX_THREADS_PER_BLOCK for size in _cuda_block_sizes(source))
    return True


class _Positions:
    """Turns ast positions (UTF-8 byte columns) and tokenize positions into offsets."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.line_starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", source)]

    def from_chars(self, line: int, column: int) -> int:
        return self.line_starts[line - 1] + column

    def from_bytes(self, line: int, column: int) -> int:
        start = self.line_starts[line - 1]
        text = self.source[start : start + column]  # a byte column never exceeds chars
        return start + len(text.encode()[:column].decode(errors="ignore"))

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)


def _unique(knobs: list[Knob]) -> list[Knob]:
    """Knobs sorted by offset, one per literal, with no linked literal that is itself a knob."""
    by_span = {(knob.start, knob.end): knob for knob in reversed(knobs)}
    spans = set(by_span)
    return [
        Knob(k.kind, k.name, k.value, k.start, k.end, k.line,
             tuple(link for link in k.linked if link[:2] not in spans))
        for _, k in sorted(by_span.items())
    ]


# ---- Triton: the Python AST ----------------------------------------------------------

_SIZE_NAME = re.compile(r"BLOCK|TILE|GROUP_SIZE")
_ALL_CAPS = re.compile(r"^[A-Z][A-Z0-9_]*$")
_PIPELINE = ("num_warps", "num_stages")


def _triton_knobs(source: str) -> list[Knob]:
    try:
        tree = parse_source(source)
    except SyntaxError:
        return []  # nothing to tune in a file that does not parse
    positions = _Positions(source)
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
    return _unique(knobs + _triton_constants(tree, positions, references))


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
    call: ast.Call, value: int, positions: _Positions, tree: ast.AST
) -> tuple[_Link, ...]:
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
    tree: ast.AST, positions: _Positions, references: dict[str, tuple[str, str]]
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


def _span(positions: _Positions, node: ast.expr) -> tuple[int, int]:
    start = positions.from_bytes(node.lineno, node.col_offset)
    return start, positions.from_bytes(node.end_lineno or node.lineno, node.end_col_offset or 0)


def _knob_at(positions: _Positions, node: ast.expr, value: int, kind: str, name: str,
             linked: tuple[_Link, ...] = ()) -> Knob:
    start, end = _span(positions, node)
    return Knob(kind, name, value, start, end, node.lineno, linked)


# ---- CUDA: string literals holding load_inline sources ---------------------------------

_CUDA_MARKERS = ("__global__", "<<<", "#include", "#define")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+\(?[ \t]*(\d+)[ \t]*\)?[ \t\r]*$", re.M)
_CONST_INT = re.compile(
    r"\b(?:(?:static|const|constexpr)\s+)*(?:unsigned\s+)?(?:int|int32_t|uint32_t|size_t|long)"
    r"\s+(\w+)\s*=\s*(\d+)\s*;"
)
_DIM3_DECL = re.compile(r"\bdim3\s+(\w+)\s*(?:=\s*dim3\s*)?[({]([^;(){}]*)[)}]")
_DIM3_INLINE = re.compile(r"dim3\s*\((.*)\)", re.S)
_LAUNCH = re.compile(r"(\w*)\s*<<<(.*?)>>>", re.S)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _cuda_segments(source: str) -> list[_Segment]:
    """CUDA string literals as written (comments blanked) with their offsets in the source."""
    positions = _Positions(source)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    segments = []
    for token in tokens:
        if token.type != tokenize.STRING or not any(m in token.string for m in _CUDA_MARKERS):
            continue
        start = positions.from_chars(*token.start)
        if source[start : start + len(token.string)] == token.string:
            blank = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), token.string)
            segments.append((blank, start))
    return segments


def _cuda_constants(segment: _Segment) -> Iterator[tuple[str, int, int]]:
    """(name, value, offset of the value) of each #define and int constant."""
    text, offset = segment
    for pattern in (_DEFINE, _CONST_INT):
        for match in pattern.finditer(text):
            if not match.group(2).startswith("0"):  # C reads 010 as octal: leave those alone
                yield match.group(1), int(match.group(2)), offset + match.start(2)


def _cuda_knobs(source: str) -> list[Knob]:
    positions = _Positions(source)
    segments = _cuda_segments(source)
    block_names = {block for seg in segments for _kernel, _grid, (block, _at) in _launches(seg)}
    knobs: list[Knob] = []
    for segment in segments:
        for name, value, start in _cuda_constants(segment):
            kind = "threads" if name in block_names else _cuda_kind(name, value)
            if kind and value >= 1:
                end = start + len(str(value))
                knobs.append(Knob(kind, name, value, start, end, positions.line_of(start)))
        knobs += _cuda_launch_knobs(segment, positions, block_names)
    return _unique(knobs)


def _cuda_kind(name: str, value: int) -> str | None:
    """A kind from a CUDA constant's name; None for names that are not tuning knobs."""
    upper = name.upper()
    if re.search(r"WARP_?SIZE|BLOCKS|GRID", upper):
        return None  # hardware constants and grid sizes are not ours to change
    if re.search(r"TILE|UNROLL|PER_?THREAD|BLOCK_?[MNKXY]$", upper):
        return "tile"
    if "WARPS" in upper:
        return "num_warps"
    if "THREAD" in upper or "TPB" in upper:
        return "threads"
    if "BLOCK" in upper:
        return "threads" if value % 32 == 0 else "tile"
    return None


def _cuda_launch_knobs(
    segment: _Segment, positions: _Positions, block_names: set[str]
) -> list[Knob]:
    """Literal threads per block in <<<...>>> launches and in the dim3 they name."""
    knobs = []
    for kernel, (grid, grid_at), (block, block_at) in _launches(segment):
        if block.isdigit():
            value = int(block)
            links = tuple(
                (grid_at + m.start(), grid_at + m.end(), int(m.group()) - value)
                for m in re.finditer(r"\b\d+\b", grid)
                if int(m.group()) in (value, value - 1)
            )
            end = block_at + len(block)
            line = positions.line_of(block_at)
            knobs.append(Knob("threads", f"{kernel}.threads", value, block_at, end, line, links))
        elif inline := _DIM3_INLINE.fullmatch(block):
            at = block_at + inline.start(1)
            knobs += _dim3_knobs(f"{kernel}.block", inline.group(1), at, positions)
    text, offset = segment
    for match in _DIM3_DECL.finditer(text):
        if match.group(1) in block_names:
            knobs += _dim3_knobs(match.group(1), match.group(2), offset + match.start(2), positions)
    return knobs


def _dim3_knobs(variable: str, arguments: str, at: int, positions: _Positions) -> list[Knob]:
    return [
        Knob("launch", f"{variable}.{axis}", int(text), offset, offset + len(text),
             positions.line_of(offset))
        for (text, offset), axis in zip(_split_top_level(arguments, at), "xyz")
        if text.isdigit()
    ]


def _launches(segment: _Segment) -> Iterator[tuple[str, tuple[str, int], tuple[str, int]]]:
    """Each <<<...>>> launch as (kernel, grid, block), the last two as (text, offset)."""
    text, offset = segment
    for match in _LAUNCH.finditer(text):
        parts = _split_top_level(match.group(2), offset + match.start(2))
        if len(parts) >= 2:
            yield match.group(1) or "kernel", parts[0], parts[1]


def _split_top_level(text: str, offset: int) -> list[tuple[str, int]]:
    """Comma-separated arguments outside brackets, stripped, with their offsets."""
    parts, depth, begin = [], 0, 0
    for index, char in enumerate(text + ","):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            piece = text[begin:index]
            parts.append((piece.strip(), offset + begin + len(piece) - len(piece.lstrip())))
            begin = index + 1
    return parts


def _cuda_block_sizes(source: str) -> list[int]:
    """Threads per block of every launch whose block size the source fixes."""
    segments = _cuda_segments(source)
    values = {name: value for seg in segments for name, value, _ in _cuda_constants(seg)}
    dims = {m.group(1): m.group(2) for text, _ in segments for m in _DIM3_DECL.finditer(text)}
    sizes = []
    for block in (block for seg in segments for _kernel, _grid, (block, _at) in _launches(seg)):
        inline = _DIM3_INLINE.fullmatch(block)
        factors = _split_top_level(inline.group(1) if inline else dims.get(block, block), 0)
        numbers = [int(text) if text.isdigit() else values.get(text) for text, _at in factors]
        known = [number for number in numbers if number is not None]
        if len(known) == len(numbers):  # sizes computed at run time are not ours to check
            sizes.append(math.prod(known))
    return sizes
