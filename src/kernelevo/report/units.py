"""Numbers as people read them: speedups, dollars, token counts, durations."""

from __future__ import annotations

import time
from collections.abc import Callable

MISSING = "-"


def speedup(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}x"


def usd(value: float | None) -> str:
    if value is None:
        return MISSING
    # Cents matter at this scale: a typical call costs a fraction of one.
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def tokens(value: float | None) -> str:
    if value is None:
        return MISSING
    if value >= 1_000_000:
        return f"{value / 1_000_000:.2f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:,.0f}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return MISSING
    if 0 < seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 or seconds == 0 else f"{seconds:.1f}s"
    minutes, rest = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m {rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def milliseconds(value: float | None) -> str:
    return MISSING if value is None else f"{value:.4f} ms"


def limit(value: float | None, show: Callable[[float | None], str]) -> str:
    """A budget limit, or 'no limit' when none was set."""
    return "no limit" if value is None else show(value)


def when(timestamp: float | None) -> str:
    if not timestamp:
        return MISSING
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timestamp))
