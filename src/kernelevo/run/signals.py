"""SIGTERM ends a command the way Ctrl-C does, instead of killing the process where it stands.

Schedulers, `timeout`, systemd and `docker stop` send SIGTERM. Its default
action ends Python at once: no `finally` runs, so a run stayed `running`
forever and a judge's children outlived it. Here SIGTERM raises `Terminated`,
a KeyboardInterrupt, so every path that cleans up after Ctrl-C runs for it too.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType

# What a shell reports for a process ended by SIGTERM, kept as the exit status.
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_INTERRUPTED = 128 + signal.SIGINT  # Ctrl-C, as a shell reports it


class Terminated(KeyboardInterrupt):
    """The process was asked to stop with SIGTERM."""


def raise_terminated(signum: int = signal.SIGTERM, frame: FrameType | None = None) -> None:
    raise Terminated("stopped by SIGTERM")


@contextmanager
def on_sigterm(action: Callable[[int, FrameType | None], object]) -> Iterator[None]:
    """While inside, SIGTERM calls `action` in the main thread; the old handler is restored after.

    Only the main thread may set signal handlers: elsewhere (the Python API
    called from a worker thread) this does nothing and SIGTERM keeps its meaning.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, action)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def sigterm_as_interrupt() -> AbstractContextManager[None]:
    """While inside, SIGTERM raises `Terminated` (a KeyboardInterrupt) in the main thread."""
    return on_sigterm(raise_terminated)


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """While inside, Ctrl-C and SIGTERM wait; one that came is delivered on leaving.

    For steps that must happen together or not at all (a suite's row written
    to its results and counted in its account): interrupted between the two,
    the account missed a row the file held. Outside the main thread, where
    signals are not handled, or where a handler was set outside Python (it
    could not be put back), this does nothing.
    """
    kinds = (signal.SIGINT, signal.SIGTERM)
    previous = {kind: signal.getsignal(kind) for kind in kinds}
    # None: a handler set outside Python, which could not be put back afterwards
    if threading.current_thread() is not threading.main_thread() or None in previous.values():
        yield
        return
    came: list[int] = []
    for kind in kinds:
        signal.signal(kind, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        for kind in kinds:
            signal.signal(kind, previous[kind])
        for signum in dict.fromkeys(came):  # each kind once, in the order they came
            signal.raise_signal(signum)
