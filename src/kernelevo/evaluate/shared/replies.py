"""The judge's replies to its children's questions (`Channel.ask`): one frozen dataclass each.

A reply crosses the pipe as a JSON object of its fields, with no kind: the
child that asked knows what it asked, and decodes the reply with that type's
`from_json` (messages.py has the base class and the children's own messages).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelevo.evaluate.shared.messages import Message


@dataclass(frozen=True)
class Granted(Message):
    """The empty reply: go on."""


@dataclass(frozen=True)
class Abort(Message):
    """The reply to `Ready` when no candidates will come: stop."""

    abort: bool = True


@dataclass(frozen=True)
class ReadyReply(Message):
    """The reply to `Ready`: the input sets to check on and the candidates (source, backend)."""

    seeds: tuple[int, ...]
    variants: tuple[float | None, ...]
    tolerances: tuple[tuple[float, ...], ...]  # (atol, rtol) by output
    candidates: tuple[dict[str, str], ...] = ()  # {"source": ..., "backend": ...} each


@dataclass(frozen=True)
class BaselinesReply(Message):
    """The reply to `StoredBaselines`: the stored times, or whether to time them now."""

    measures: dict[str, dict[str, dict[str, Any]]] | None = None
    measured_at: str = ""
    notes: tuple[str, ...] = ()
    time_them: bool = False


@dataclass(frozen=True)
class QuietReply(Message):
    """The reply to `HostQuiet`: how many of the judge's other jobs stand still now; to its
    end (`on` False), the seconds after which it was cut short, if it was (sandbox/quiet.py)."""

    held: int = 0
    cut_s: float = 0.0


@dataclass(frozen=True)
class TimeThese(Message):
    """The reply to `Checked`: the indexes of the candidates to time."""

    time: tuple[int, ...] = ()


def reply_to_ready(data: Any) -> "ReadyReply | Abort":
    """The judge's answer to `Ready`, as the worker reads it."""
    if isinstance(data, dict) and data.get("abort"):
        return Abort.from_json(data)
    return ReadyReply.from_json(data)
