"""A kernel's numeric knobs as the tuner finds them, and offsets into its source."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

MAX_THREADS_PER_BLOCK = 1024  # the CUDA limit on every GPU since compute capability 2.0
Link = tuple[int, int, int]  # (start, end, delta) of a literal that moves with a knob


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


class Positions:
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


def unique_knobs(knobs: list[Knob]) -> list[Knob]:
    """Knobs sorted by offset, one per literal, with no linked literal that is itself a knob."""
    by_span = {(knob.start, knob.end): knob for knob in reversed(knobs)}
    spans = set(by_span)
    return [
        Knob(k.kind, k.name, k.value, k.start, k.end, k.line,
             tuple(link for link in k.linked if link[:2] not in spans))
        for _, k in sorted(by_span.items())
    ]
