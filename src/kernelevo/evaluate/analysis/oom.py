"""Out of memory, told apart from other errors, with the size the failed allocation asked for.

PyTorch says it two ways: `torch.OutOfMemoryError` ("CUDA out of memory.
Tried to allocate 6.40 GiB ...") on a GPU, and a plain RuntimeError from the
CPU allocator ("DefaultCPUAllocator: can't allocate memory: you tried to
allocate 4398046511104 bytes"); Python's own is MemoryError.
"""

from __future__ import annotations

import re

import torch

_MARKS = ("out of memory", "can't allocate memory", "Cannot allocate memory")
_CUDA_SIZE = re.compile(r"Tried to allocate (\d+(?:\.\d+)? ?[KMGTP]i?B)")
_CPU_BYTES = re.compile(r"tried to allocate (\d+) bytes")
_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` says an allocation failed (GPU or host)."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = f"{type(exc).__name__}: {exc}"
    return any(mark in text for mark in _MARKS)


def said_in(log: str) -> bool:
    """Whether a process's log shows it died of an allocation that failed."""
    return "MemoryError" in log or any(mark in log for mark in _MARKS)


def requested_size(text: str) -> str | None:
    """The size the (last) failed allocation asked for, as "6.40 GiB", if the text gives it."""
    found = _CUDA_SIZE.findall(text)
    if found:
        return found[-1]
    found = _CPU_BYTES.findall(text)
    return in_units(int(found[-1])) if found else None


def in_units(size_bytes: int) -> str:
    """A byte count in the largest binary unit that keeps it at 1 or more: 6.40 GiB."""
    size, unit = float(size_bytes), 0
    while size >= 1024 and unit < len(_UNITS) - 1:
        size, unit = size / 1024, unit + 1
    return f"{size_bytes} bytes" if unit == 0 else f"{size:.2f} {_UNITS[unit]}"


def summary(text: str, during: str) -> str:
    """One line for a verdict: when memory ran out and how much the allocation asked for."""
    size = requested_size(text)
    asked = f"it tried to allocate {size}" if size else "the message gives no size"
    return f"out of memory during {during}: {asked}"
