"""The tuner's knobs of a CUDA candidate: integer literals in its load_inline sources.

#define and int constants, threads per block and launch dimensions of
`<<<grid, block>>>`, each with the literals that must move with it.
"""

from __future__ import annotations

import io
import math
import re
import tokenize
from collections.abc import Iterator

from kernelevo.propose.knobs import Knob, Positions, unique_knobs

Segment = tuple[str, int]  # a CUDA string literal as written, and its offset in the source


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


def _cuda_segments(source: str) -> list[Segment]:
    """CUDA string literals as written (comments blanked) with their offsets in the source."""
    positions = Positions(source)
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


def _cuda_constants(segment: Segment) -> Iterator[tuple[str, int, int]]:
    """(name, value, offset of the value) of each #define and int constant."""
    text, offset = segment
    for pattern in (_DEFINE, _CONST_INT):
        for match in pattern.finditer(text):
            if not match.group(2).startswith("0"):  # C reads 010 as octal: leave those alone
                yield match.group(1), int(match.group(2)), offset + match.start(2)


def cuda_knobs(source: str) -> list[Knob]:
    positions = Positions(source)
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
    return unique_knobs(knobs)


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
    segment: Segment, positions: Positions, block_names: set[str]
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


def _dim3_knobs(variable: str, arguments: str, at: int, positions: Positions) -> list[Knob]:
    return [
        Knob("launch", f"{variable}.{axis}", int(text), offset, offset + len(text),
             positions.line_of(offset))
        for (text, offset), axis in zip(_split_top_level(arguments, at), "xyz")
        if text.isdigit()
    ]


def _launches(segment: Segment) -> Iterator[tuple[str, tuple[str, int], tuple[str, int]]]:
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


def cuda_block_sizes(source: str) -> list[int]:
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
