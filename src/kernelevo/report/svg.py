"""Plots as inline SVG strings: step lines, stacked status areas, cell grids.

Drawn in Python so a report is one file that opens offline, with no plotting
library to install; every value a plot shows is also in a tooltip (<title>).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

from markupsafe import Markup

from kernelevo.report.lineage import CellView, IslandCells

WIDTH, HEIGHT = 640, 280
STATUS_PLOT_STEPS = 500  # a step per 1.3 px of plot: more would not show
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 28, 44
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
           "#e377c2", "#7f7f7f", "#bcbd22")
STATUS_COLORS = {
    "ok": "#2e7d32", "incorrect": "#f9a825", "compile_error": "#c62828",
    "runtime_error": "#ef6c00", "rejected": "#6a1b9a", "timeout": "#5d4037",
    "crashed": "#37474f", "skipped": "#9e9e9e", "pending": "#90caf9",
}
NO_TIMINGS = "no timings (CPU run)"

Link = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Series:
    """One line: points (x, y, candidate id) in order; the last y runs on to `end_x`."""

    label: str
    points: tuple[tuple[float, float, str], ...]
    end_x: float
    color: str = PALETTE[0]


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values from at most `low` to at least `high`."""
    if not high > low:
        high = low + 1.0
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if raw <= m * magnitude)
    # The axis must reach both ends: the first tick at or below `low`, the last at or above `high`.
    first = math.floor(low / step + 1e-9) * step
    count = math.ceil((high - first) / step - 1e-9)
    return [round(first + i * step, 12) for i in range(count + 1)]


class _Frame:
    """Maps data to pixels inside the axes and draws the axes themselves."""

    def __init__(self, x_high: float, y_low: float, y_high: float) -> None:
        self.x_ticks = nice_ticks(0.0, x_high if x_high > 0 else 1.0)
        self.y_ticks = nice_ticks(y_low, y_high)
        self.x_high = self.x_ticks[-1] if self.x_ticks[-1] > 0 else 1.0
        self.y_low, self.y_high = self.y_ticks[0], self.y_ticks[-1]
        if self.y_high <= self.y_low:
            self.y_high = self.y_low + 1.0

    def x(self, value: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * value / self.x_high

    def y(self, value: float) -> float:
        share = (value - self.y_low) / (self.y_high - self.y_low)
        return HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * share

    def axes(self, x_label: str, y_label: str, x_format: Callable[[float], str]) -> list[str]:
        parts = []
        for tick in self.y_ticks:
            y = self.y(tick)
            parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" '
                         f'y2="{y:.1f}"/><text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" '
                         f'text-anchor="end">{_number(tick)}</text>')
        for tick in self.x_ticks:
            x = self.x(tick)
            parts.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" '
                         f'text-anchor="middle">{_text(x_format(tick))}</text>')
        parts.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" '
                     f'y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM}"/>'
                     f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" '
                     f'y2="{HEIGHT - BOTTOM}"/>')
        parts.append(f'<text class="label" x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 6}" '
                     f'text-anchor="middle">{_text(x_label)}</text>'
                     f'<text class="label" transform="translate(14 {(TOP + HEIGHT - BOTTOM) / 2})'
                     f' rotate(-90)" text-anchor="middle">{_text(y_label)}</text>')
        return parts


def step_plot(series: Sequence[Series], *, title: str, x_label: str,
              x_format: Callable[[float], str], y_label: str = "speedup (x)",
              link: Link | None = None, empty: str = NO_TIMINGS) -> Markup:
    """Best-so-far lines, stepping up at each improvement; 1x (eager) dashed."""
    drawn = [one for one in series if one.points]
    if not drawn:
        return _empty(title, empty)
    xs = [x for one in drawn for x, _, _ in one.points] + [one.end_x for one in drawn]
    ys = [y for one in drawn for _, y, _ in one.points]
    frame = _Frame(max(xs), 0.0, max(max(ys), 1.0) * 1.1)
    parts = frame.axes(x_label, y_label, x_format)
    parts.append(f'<line class="reference" x1="{LEFT}" x2="{WIDTH - RIGHT}" '
                 f'y1="{frame.y(1.0):.1f}" y2="{frame.y(1.0):.1f}"/>')
    for one in drawn:
        parts.append(_step_line(frame, one, link))
    parts.append(_legend([(one.label, one.color) for one in drawn]))
    count = sum(len(one.points) for one in drawn)
    return _svg(title, parts, count)


def _step_line(frame: _Frame, series: Series, link: Link | None) -> str:
    coordinates: list[tuple[float, float]] = []
    for x, y, _ in series.points:
        if coordinates:
            coordinates.append((x, coordinates[-1][1]))
        coordinates.append((x, y))
    coordinates.append((max(series.end_x, coordinates[-1][0]), coordinates[-1][1]))
    points = " ".join(f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in coordinates)
    parts = [f'<polyline class="series" stroke="{series.color}" points="{points}"/>']
    for x, y, candidate_id in series.points:
        marker = (f'<circle class="point" cx="{frame.x(x):.1f}" cy="{frame.y(y):.1f}" r="4" '
                  f'fill="{series.color}"><title>{_text(series.label)}: {candidate_id} '
                  f'{y:.3g}x</title></circle>')
        href = link(candidate_id) if link else None
        parts.append(f'<a href="{_text(href)}">{marker}</a>' if href else marker)
    return "".join(parts)


def status_plot(timeline: Sequence[tuple[float, dict[str, int]]], *, title: str,
                x_format: Callable[[float], str]) -> Markup:
    """Candidates by status over wall time, stacked; the top edge is the total."""
    if not timeline:
        return _empty(title, "no candidates yet")
    timeline = thin_timeline(timeline, STATUS_PLOT_STEPS)
    statuses = [s for s in STATUS_COLORS if any(s in counts for _, counts in timeline)]
    statuses += sorted({s for _, counts in timeline for s in counts} - set(statuses))
    end = timeline[-1][0]
    totals = [sum(counts.values()) for _, counts in timeline]
    frame = _Frame(end, 0.0, max(max(totals), 1))
    parts = frame.axes("wall time", "candidates", x_format)
    below = [0] * len(timeline)
    for status in statuses:
        above = [low + counts.get(status, 0) for low, (_, counts) in zip(below, timeline)]
        upper = _steps(frame, timeline, above, end)
        lower = _steps(frame, timeline, below, end)[::-1]
        color = STATUS_COLORS.get(status, PALETTE[len(parts) % len(PALETTE)])
        parts.append(f'<polygon class="area" fill="{color}" points="{" ".join(upper + lower)}">'
                     f'<title>{_text(status)}: {above[-1] - below[-1]} now</title></polygon>')
        below = above
    parts.append(_legend([(s, STATUS_COLORS.get(s, PALETTE[0])) for s in statuses]))
    return _svg(title, parts, len(timeline))


def thin_timeline(timeline: Sequence[tuple[float, dict[str, int]]],
                  limit: int) -> Sequence[tuple[float, dict[str, int]]]:
    """At most `limit` steps: the last state in each of `limit - 1` equal spans of time.

    A step per change drew 37 MB of SVG for 50,000 candidates; a plot a few
    hundred pixels wide shows no more than this, and the final counts stay exact.
    """
    if len(timeline) <= limit:
        return timeline
    start, end = timeline[0][0], timeline[-1][0]
    spans = max(limit - 2, 1)
    width = (end - start) / spans
    if width <= 0:
        return [timeline[0], timeline[-1]]
    last_in_span: dict[int, tuple[float, dict[str, int]]] = {}
    for step in timeline[1:]:  # in time order, so each span keeps its last step
        last_in_span[min(int((step[0] - start) / width), spans)] = step
    return [timeline[0], *last_in_span.values()]


def _steps(frame: _Frame, timeline: Sequence[tuple[float, dict[str, int]]],
           heights: list[int], end: float) -> list[str]:
    points = []
    for index, ((moment, _), height) in enumerate(zip(timeline, heights)):
        following = timeline[index + 1][0] if index + 1 < len(timeline) else end
        points += [f"{frame.x(moment):.1f},{frame.y(height):.1f}",
                   f"{frame.x(following):.1f},{frame.y(height):.1f}"]
    return points


def cell_grids(islands: Sequence[IslandCells], link: Link | None = None,
               timed: bool = True) -> list[Markup]:
    """One grid per island: rows and columns shared, so islands line up.

    Untimed (no GPU) elites show as correct, never as a speedup of 1.00x.
    """
    cells = [view.cell for island in islands for view in island.cells]
    rows = sorted({_row_key(cell) for cell in cells}, key=repr)
    columns = sorted({_column_key(cell) for cell in cells}, key=repr)
    top = max((view.fitness or 0.0 for island in islands for view in island.cells), default=0.0)
    return [_grid(island, rows, columns, top if timed else 0.0, link) for island in islands]


# Grid text is 11 px: about this many pixels a character, digits and letters alike.
CHAR_PX = 6.6
LINE_PX = 13


def _grid(island: IslandCells, rows: list[tuple[Hashable, ...]],
          columns: list[tuple[Hashable, ...]], top: float, link: Link | None) -> Markup:
    """Cells sized to their longest text, so labels never overlap or run off the left.

    A cell shows its elite on one line and its speedup and failures on the
    next; column headers break at each " · " into lines of their own.
    """
    headers = [_column_label(column).split(" · ") for column in columns]
    row_labels = [_row_label(row) for row in rows]
    texts = [line for view in island.cells for line in _cell_lines(view, top)]
    cell_width = max(104, _width(line for lines in headers for line in lines) + 12,
                     _width(texts) + 12)
    label_width = _width(row_labels) + 14
    header = 10 + LINE_PX * max((len(lines) for lines in headers), default=1)
    cell_height = 12 + LINE_PX * 2
    width = label_width + cell_width * max(len(columns), 1) + 8
    height = header + cell_height * max(len(rows), 1) + 8
    parts = [f'<text class="tick" x="{label_width + i * cell_width + cell_width / 2:.0f}" '
             f'y="{14 + j * LINE_PX}" text-anchor="middle">{_text(line)}</text>'
             for i, lines in enumerate(headers) for j, line in enumerate(lines)]
    parts += [f'<text class="tick" x="{label_width - 8}" '
              f'y="{header + i * cell_height + cell_height / 2 + 2:.0f}" text-anchor="end">'
              f'{_text(label)}</text>' for i, label in enumerate(row_labels)]
    for view in island.cells:
        x = label_width + columns.index(_column_key(view.cell)) * cell_width
        y = header + rows.index(_row_key(view.cell)) * cell_height
        parts.append(_cell(view, x, y, cell_width - 4, cell_height - 4, top, link))
    title = f"island {island.index}: {sum(1 for v in island.cells if v.elite_id)} elites"
    return _svg(title, parts, len(island.cells), width, height, "cells")


def _width(lines: Iterable[str]) -> int:
    """Pixels the longest of `lines` takes in grid text."""
    return int(max((len(line) for line in lines), default=0) * CHAR_PX)


def _cell_lines(view: CellView, top: float) -> tuple[str, str]:
    """A cell's two lines: its elite (or that it has none), then its speedup and failures."""
    if view.elite_id:
        first = view.elite_id
        second = "correct" if not top else f"{view.fitness:.2f}x"
    else:
        first, second = "failed only", ""
    if view.failures:
        second = f"{second} ✕{_count(view.failures)}".strip()
    return first, second


def _count(value: int) -> str:
    """A count in at most five characters: 675, 12,345 as 12k, 1,234,567 as 1.2M."""
    if value < 10_000:
        return str(value)
    if value < 1_000_000:
        return f"{value // 1000}k"
    return f"{value / 1_000_000:.1f}M"


def _cell(view: CellView, x: float, y: float, width: float, height: float, top: float,
          link: Link | None) -> str:
    tip = f"{_row_label(_row_key(view.cell))} · {_column_label(_column_key(view.cell))}: "
    if view.elite_id and not top:  # untimed: correct, with no speedup to show
        fill = 'fill="#2e7d32" fill-opacity="0.45"'
        tip += f"elite {view.elite_id}, correct (not timed)"
    elif view.elite_id:
        strength = 0.15 + 0.55 * (view.fitness or 0.0) / top
        fill = f'fill="#2e7d32" fill-opacity="{strength:.2f}"'
        tip += f"elite {view.elite_id} at {view.fitness:.3g}x"
    else:
        fill = 'fill="#f8d7da"'
    if view.failures:
        tip += f", {view.failures:,} failed here"
    first, second = _cell_lines(view, top)
    middle = x + width / 2
    lines = "".join(
        f'<text class="cell-text" x="{middle:.0f}" y="{y + height / 2 + offset:.0f}" '
        f'text-anchor="middle">{_text(line)}</text>'
        for line, offset in ((first, -2), (second, LINE_PX - 2)) if line)
    body = (f'<rect class="cell" x="{x}" y="{y}" width="{width}" height="{height}" rx="3" '
            f'{fill}><title>{_text(tip)}</title></rect>{lines}')
    href = link(view.elite_id) if link and view.elite_id else None
    return f'<a href="{_text(href)}">{body}</a>' if href else body


def _row_key(cell: tuple[Hashable, ...]) -> tuple[Hashable, ...]:
    return tuple(cell[:3])


def _column_key(cell: tuple[Hashable, ...]) -> tuple[Hashable, ...]:
    return tuple(cell[3:])


def _row_label(key: tuple[Hashable, ...]) -> str:
    # Cells are (backend, fusion, matrix_units, memory, block): see search/descriptors.py.
    if len(key) == 3 and isinstance(key[2], bool):
        units = " · tensor cores" if key[2] else ""
        return f"{key[0]} · {key[1]} kernel(s){units}"
    return " · ".join(map(str, key)) or "-"


def _column_label(key: tuple[Hashable, ...]) -> str:
    if len(key) == 2:  # (memory, block): "direct · unknown" alone reads as nothing
        block = "?" if key[1] == "unknown" else key[1]
        return f"{key[0]} memory · block {block}"
    return " · ".join(map(str, key)) or "-"


def _legend(entries: list[tuple[str, str]]) -> str:
    parts = []
    x = LEFT + 8
    for label, color in entries:
        parts.append(f'<rect x="{x}" y="8" width="10" height="10" fill="{color}"/>'
                     f'<text class="legend" x="{x + 14}" y="17">{_text(label)}</text>')
        x += 22 + 7 * len(label)
    return "".join(parts)


def _empty(title: str, message: str) -> Markup:
    parts = [f'<text class="empty" x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">'
             f'{_text(message)}</text>']
    return _svg(title, parts, 0, WIDTH, HEIGHT / 2 + 40)


def _svg(title: str, parts: list[str], points: int, width: float = WIDTH,
         height: float = HEIGHT, kind: str = "plot") -> Markup:
    return Markup(f'<figure class="{kind}"><figcaption>{_text(title)}</figcaption>'
                  f'<svg class="{kind}" viewBox="0 0 {width:.0f} {height:.0f}" '
                  f'width="{width:.0f}" height="{height:.0f}" role="img" '
                  f'aria-label="{_text(title)}" data-points="{points}">'
                  f'<title>{_text(title)}</title>{"".join(parts)}</svg></figure>')


def _text(value: object) -> str:
    return html.escape(str(value))


def _number(value: float) -> str:
    return f"{value:g}"
