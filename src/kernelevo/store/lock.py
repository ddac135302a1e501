"""One driver per run: an exclusive lock on `<run_dir>/run.lock`, held while a process runs it.

A second process that resumed a run still being searched would reserve and
record against the same budget twice and evaluate the same pending
candidates again. `flock` ends with the process that holds it, SIGKILL
included, so a crashed run never stays locked: the next `--resume` gets it.

The lock also tells readers whether a run still has a driver. A driver killed
outright (SIGKILL, the OOM killer, a machine gone down) cannot record that it
stopped, so its run.db says `running` forever; `runs`, `show`, the report and
the UI show such a run `interrupted`, like a run stopped by Ctrl-C or SIGTERM,
and it resumes the same way. They only look: run.db is left as it is.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from kernelevo.errors import KernelEvoError, RunBusyError

LOCK_NAME = "run.lock"
# A reader's probe holds a shared lock for microseconds; a driver starting in
# that instant waits this long for it instead of failing as if the run were busy.
_PROBE_GRACE_S = 1.0
_RETRY_S = 0.02
# What a run recorded as `running` is shown as once no process drives it.
UNDRIVEN_STATUS = "interrupted"


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
        _lock_exclusive(handle)
    except BlockingIOError:
        holder = _read_holder(handle)
        os.close(handle)
        raise RunBusyError(
            f"run {run_id} is being driven by another process{holder}: two processes would "
            f"spend its budget twice. Wait for it to stop, or stop it (Ctrl-C, or "
            f"`kill PID`, which marks the run interrupted), then --resume {run_id}") from None
    _write_holder(handle)
    return RunLock(run_dir, handle)


def _lock_exclusive(handle: int) -> None:
    """Take the lock, waiting out a reader's probe; BlockingIOError if a driver holds it."""
    deadline = time.monotonic() + _PROBE_GRACE_S
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(_RETRY_S)


def is_driven(run_dir: str | Path) -> bool | None:
    """Whether a process holds the run's lock now; None if no driver ever took it.

    Probes with a shared lock, dropped at once, so readers never block each
    other and a driver starting meanwhile waits for it (`_lock_exclusive`).
    """
    try:
        handle = os.open(Path(run_dir) / LOCK_NAME, os.O_RDONLY)
    except OSError:  # no lock file: a run from before run locks, or one being created
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(handle)  # drops the probe's lock
    return False


def status_now(recorded: str, run_dir: str | Path) -> str:
    """The run's status as readers show it: `running` only while a process drives it."""
    if recorded == "running" and is_driven(run_dir) is False:
        return UNDRIVEN_STATUS
    return recorded


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
