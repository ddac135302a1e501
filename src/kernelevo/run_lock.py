"""One driver per run: an exclusive lock on `<run_dir>/run.lock`, held while a process runs it.

A second process that resumed a run still being searched would reserve and
record against the same budget twice and evaluate the same pending
candidates again. `flock` ends with the process that holds it, SIGKILL
included, so a crashed run never stays locked: the next `--resume` gets it.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from kernelevo.errors import KernelEvoError

LOCK_NAME = "run.lock"


class RunBusyError(KernelEvoError):
    """Another process is driving this run."""


class RunLock:
    """The exclusive right to drive one run; release it with `release` or `with`."""

    def __init__(self, run_dir: Path, handle: int) -> None:
        self.run_dir = run_dir
        self._handle: int | None = handle

    @property
    def held(self) -> bool:
        return self._handle is not None

    def release(self) -> None:
        if self._handle is not None:
            os.close(self._handle)  # closing the descriptor drops the flock
            self._handle = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()


def acquire_run_lock(run_dir: str | Path, run_id: str) -> RunLock:
    """Take the run's lock without waiting; RunBusyError names the process that holds it."""
    run_dir = Path(run_dir)
    path = run_dir / LOCK_NAME
    try:
        # O_CLOEXEC (Python's default): children never inherit the lock.
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise KernelEvoError(f"cannot open the lock file {path}: {exc}") from exc
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(handle)
        os.close(handle)
        raise RunBusyError(
            f"run {run_id} is being driven by another process{holder}: two processes would "
            f"spend its budget twice. Wait for it to stop, or stop it (Ctrl-C, or "
            f"`kill PID`, which marks the run interrupted), then --resume {run_id}") from None
    _write_holder(handle)
    return RunLock(run_dir, handle)


def _write_holder(handle: int) -> None:
    """Who holds the lock, for the message a second process prints."""
    os.ftruncate(handle, 0)
    os.pwrite(handle, f"{os.getpid()} {time.time():.0f}\n".encode(), 0)


def _read_holder(handle: int) -> str:
    try:
        pid, since = os.pread(handle, 100, 0).decode().split()
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(since)))
    except (OSError, ValueError):
        return ""
    return f" (pid {pid}, since {started})"
