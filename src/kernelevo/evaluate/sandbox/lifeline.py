"""How a sandboxed child ends when its judge dies without cleaning up (SIGKILL, OOM killer).

A candidate must not keep running on the GPU with no judge to stop it. Each
child forks a guard into its session that waits on a pipe only the judge
writes to, and kills the session at end of file. The guard is a process, not
a thread, because a candidate stuck in one long C call holds the GIL and
would starve a thread. Where Linux allows it the child also asks the kernel
to SIGKILL it when its parent, the forkserver, exits; the forkserver exits
once the judge is gone and no child holds its "alive" pipe, so each child
lets go of that pipe first.

What can outlive a killed judge: a process the candidate moved out of the
session (setsid) without the child's marker in its environment, i.e. one
forked rather than started anew, or started with an environment of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any, NoReturn

# Set in each child's environment, so processes it starts can be found and killed.
MARKER_ENV = "KERNELEVO_SANDBOX_ID"
_PR_SET_PDEATHSIG = 1  # prctl option: the signal to get when the parent exits (linux/prctl.h)
# Descriptors the guard closes: all below this (sysconf says -1 where unlimited).
_MAX_FD = max(os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 0, 0) or 1 << 16


def release_forkserver() -> None:
    """Close this child's copy of the forkserver's "alive" pipe.

    The forkserver exits when every holder of that pipe's write end is gone;
    multiprocessing gives each child one, so without this a running child
    keeps the forkserver (its parent) alive after the judge died.
    """
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    alive_fd = getattr(server, "_forkserver_alive_fd", None)
    if alive_fd is not None:
        with contextlib.suppress(OSError):
            os.close(alive_fd)
        server._forkserver_alive_fd = None  # type: ignore[union-attr]


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent exits (Linux only).

    The parent may already have exited before the request took hold; then
    nothing would ever send the signal, so this process ends itself.
    """
    parent = os.getppid()
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no prctl: the guard alone ends the session
        return
    if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return
    if os.getppid() != parent:
        os._exit(1)


def start_guard(lifeline: Any, marker: str) -> int:
    """Fork the process that kills this session once the judge is gone; its pid.

    Called before this child starts any thread, so the fork copies a
    single-threaded process.
    """
    pid = os.fork()
    if pid == 0:
        try:
            _guard(lifeline.fileno(), marker)
        finally:
            os._exit(1)  # never return into the child's work
    return pid


def _guard(lifeline_fd: int, marker: str) -> NoReturn:
    """Wait for the judge's end of the lifeline to close, then kill the session.

    The judge holds the write end and never writes to it: the read ends only
    when the judge's process is gone, however it died.
    """
    try:
        # Hold nothing else open: the judge must see the child's end of the
        # message pipe close when the child exits, and the forkserver its
        # "alive" pipe.
        os.closerange(0, lifeline_fd)
        os.closerange(lifeline_fd + 1, _MAX_FD)
        while os.read(lifeline_fd, 1):
            pass
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            kill_marked(marker)  # those the candidate moved out of the session
        with contextlib.suppress(OSError):
            os.killpg(0, signal.SIGKILL)  # the session, this guard included
        os._exit(0)


def stop_guard(pid: int) -> None:
    """End and reap the guard of a child that finished on its own."""
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def kill_marked(marker: str) -> None:
    """Kill every other process whose environment carries the child's marker."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if f"{MARKER_ENV}={marker}".encode() in environ:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
