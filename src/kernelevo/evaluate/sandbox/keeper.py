"""No process a candidate starts outlives its job: a keeper that is every orphan's parent.

The child that multiprocessing started (and the judge waits for) becomes a
keeper: a child subreaper (PR_SET_CHILD_SUBREAPER) that forks the worker and
never runs candidate code. Whatever the worker starts, and however that
detaches itself (setsid, double fork, `env -i`), it stays below the keeper:
an orphan is re-parented to the nearest subreaper, not to init. When the
worker ends, or the judge asks with SIGTERM, or the judge's forkserver dies
(the keeper's parent-death signal is SIGTERM), the keeper kills all its
descendants, then exits as the worker did, so the judge reads the worker's
own exit code or signal.

Why not a PID namespace: CUDA IPC handles, which carry a GPU worker's outputs
to the judge, cannot be opened across PID namespaces. Once the worker is
forked, a root keeper becomes a user of its own that keeps only the right to
kill (CAP_KILL): a worker, root's uid or the sandbox's, can neither signal
nor trace it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import NoReturn

from kernelevo.evaluate.sandbox import namespaces

_MAX_ROUNDS = 10_000  # rounds of killing; each round ends all processes that exist then
KEEPER_ID = 65532  # the keeper's user: neither root nor the worker's (confine.SANDBOX_ID)


class _JobEnds(Exception):
    """SIGTERM reached the keeper: the job is over."""


class _Signals:
    """Whether SIGTERM came, and whether the keeper waits where it may be interrupted."""

    asked = False
    waiting = False


def split() -> tuple[str, int | None]:
    """Fork the worker below a keeper; returns in the worker only (with the keeper's pid).

    In the keeper this never returns. Where the kernel refuses a subreaper the
    process goes on as the worker itself: ('absent (...)', None).
    """
    try:
        namespaces.prctl(namespaces.PR_SET_CHILD_SUBREAPER, 1)
    except OSError as exc:
        return f"processes may outlive the job ({exc.strerror})", None
    keeper = os.getpid()
    worker = os.fork()
    if worker == 0:
        return "every process the job starts dies with it", keeper
    _keep(worker)


def _keep(worker: int) -> NoReturn:
    """Reap orphans until the worker ends (or SIGTERM), kill what is left, end as it did."""
    status = 0x9  # killed (SIGKILL) unless the worker's own status is seen
    signal.signal(signal.SIGTERM, _end_job)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the judge's Ctrl-C is the judge's to handle
    _keep_only_the_right_to_kill()
    with contextlib.suppress(OSError):  # the forkserver gone: end the job, not just this process
        namespaces.prctl(namespaces.PR_SET_PDEATHSIG, signal.SIGTERM)
    try:
        if os.getppid() == 1:
            raise _JobEnds
        while True:
            _Signals.waiting = True
            if _Signals.asked:  # came while an orphan was reaped
                raise _JobEnds
            pid, found = os.wait()
            _Signals.waiting = False
            if pid == worker:
                status = found
                break
    except (_JobEnds, ChildProcessError):
        _Signals.waiting = False
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kill_descendants()
    _end_as(status)


def _keep_only_the_right_to_kill() -> None:
    """A root keeper becomes KEEPER_ID with CAP_KILL alone; else it stays as it is."""
    if os.geteuid() != 0:
        return
    try:
        namespaces.prctl(namespaces.PR_SET_KEEPCAPS, 1)
        os.setgroups([])
        os.setresgid(KEEPER_ID, KEEPER_ID, KEEPER_ID)
        os.setresuid(KEEPER_ID, KEEPER_ID, KEEPER_ID)
        namespaces.keep_only_capabilities(namespaces.CAP_KILL)
    except OSError:
        pass  # a keeper that stays root still ends the job; only a root worker could stop it


def _end_job(signum: int, frame: object) -> None:
    # Raised only inside the wait, and once: a second SIGTERM (the judge asks
    # again as it stops the job) must not escape the keeper past kill_descendants.
    _Signals.asked = True
    if _Signals.waiting:
        _Signals.waiting = False
        raise _JobEnds


def kill_descendants() -> None:
    """SIGKILL every child, reap it, and again, until none is left.

    Each round's orphans were re-parented here, so they are the next round's
    children; a process killed cannot fork again, so the rounds end.
    """
    for _ in range(_MAX_ROUNDS):
        children = _children()
        if not children:
            return
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:  # only these: an orphan still alive would block a wait for any
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _children() -> list[int]:
    """This process's children (zombies included): from /proc's children lists, else a scan."""
    me = os.getpid()
    try:
        return [int(pid) for task in Path(f"/proc/{me}/task").iterdir()
                for pid in (task / "children").read_text().split()]
    except (OSError, ValueError):
        pass
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me:
            found.append(int(entry.name))
    return found


def _end_as(status: int) -> NoReturn:
    """Exit with the worker's exit code, or die from the signal that killed it."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        os.kill(os.getpid(), number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
