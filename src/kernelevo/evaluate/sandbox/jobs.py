"""Run untrusted work in its own process group with a hard wall-clock limit.

Children are forked from a warm forkserver that has imported torch (and
triton) but never touched CUDA, so a child pays neither the import nor a
shared CUDA context. Each child starts its own session, so killing its
process group also ends compilers and anything it spawned. Messages from a
child are JSON only: unpickling what an untrusted process wrote would hand
it the judge. A judge that dies without cleaning up leaves no child running
(lifeline.py says how). Before any of its code runs, a child is confined
(confine.py: its own root, user and keeper) and starts with an allow-list
of the judge's environment (environment.py); whatever it reports has
secrets redacted (redact.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import sys
import tempfile
import threading
import time
import types
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

from kernelevo.cache_dir import default_cache_dir
from kernelevo.evaluate.sandbox import confine
from kernelevo.evaluate.shared.cores import keep_off_timing_cores
from kernelevo.evaluate.sandbox import environment as allowed
from kernelevo.evaluate.sandbox import namespaces
from kernelevo.evaluate.sandbox import quiet
from kernelevo.evaluate.sandbox import redact
from kernelevo.evaluate.sandbox.pipe import Channel, JobResult, pump
from kernelevo.evaluate.sandbox.lifeline import (
    MARKER_ENV, die_with_parent, kill_marked, release_forkserver, start_guard, stop_guard)

_EXIT_WAIT_S = 60.0  # how long a killed child may take to be gone
_KEEPER_GRACE_S = 10.0  # how long a keeper may take to end its job's processes
_context: Any = None
_start_lock = threading.Lock()
# Children running now (pid -> marker), so a process told to stop can kill them all.
_live_jobs: dict[int, str] = {}
_live_lock = threading.Lock()
_stopping = threading.Event()
_forkserver_lock = threading.Lock()
_forkserver_interpret: str | None = None  # TRITON_INTERPRET the forkserver started with
_USER_INTERPRET = os.environ.get("TRITON_INTERPRET", "")  # as the user set it, if at all


class JobsStopped(RuntimeError):
    """The process is stopping (SIGTERM): no new sandboxed job may start."""


def stop_all_jobs() -> None:
    """Kill every running child and refuse new jobs until `allow_jobs`.

    Judging threads then return at once instead of finishing evaluations
    nobody will record; without this a stopping run waits out each one.
    """
    _stopping.set()
    with _live_lock:
        running = list(_live_jobs)
    for pid in running:
        _end_job(pid)


def stopping() -> bool:
    """Whether the process is stopping (no new job may start)."""
    return _stopping.is_set()


def start_forkserver(interpret: bool | None = None) -> None:
    """Start the warm forkserver now (it imports torch and inductor: seconds).

    Call it from a thread as early as possible: the forkserver's imports then
    run while this process does its own, instead of after them. `interpret`
    sets TRITON_INTERPRET for it (unless set already): Triton decides at import
    whether its own library functions are interpreted, so a forkserver started
    with the wrong value is replaced by the first job that needs the other.
    """
    if interpret is not None:
        set_triton_mode(interpret)
    _ensure_forkserver()


def start_forkserver_for(device: str | None) -> None:
    """Start the warm forkserver for judging on `device` ("cpu", "cuda", "auto" or None).

    Without torch imported, whether a GPU is there is guessed from the
    driver's device file; a wrong guess costs a restart.
    """
    start_forkserver(device == "cpu" or (device in (None, "auto")
                                         and not os.path.exists("/dev/nvidiactl")))


def set_triton_mode(interpret: bool) -> None:
    """TRITON_INTERPRET for children to come: the user's own value, else the judge's need."""
    with _forkserver_lock:
        os.environ["TRITON_INTERPRET"] = _USER_INTERPRET or ("1" if interpret else "0")


def _ensure_forkserver() -> None:
    """A running forkserver whose TRITON_INTERPRET is this process's."""
    global _forkserver_interpret
    from multiprocessing import forkserver

    _forkserver_context()
    with _forkserver_lock:
        wanted = os.environ.get("TRITON_INTERPRET", "0")
        if _forkserver_interpret not in (None, wanted):
            # started for the other mode: a new one starts (_stop is private: not in typeshed)
            forkserver._forkserver._stop()  # type: ignore[attr-defined]
        _forkserver_interpret = wanted
        with _main_module_hidden(), allowed.spawning_with_candidate_environment():
            forkserver.ensure_running()


def allow_jobs() -> None:
    """Accept jobs again after `stop_all_jobs` (the next run in this process)."""
    _stopping.clear()


def _forkserver_context() -> Any:
    """The shared forkserver context, preloading what every child imports."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        # torch, torch._dynamo, triton and (for CUDA builds of torch) inductor:
        # seconds of imports paid once, none of which touches CUDA (preload.py).
        _context.set_forkserver_preload(["kernelevo.evaluate.child.preload"])
    return _context


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Keep multiprocessing from running the caller's `__main__` again in a child.

    multiprocessing re-runs the parent's main script (or `-m` module) in each
    child so that functions defined there can be unpickled; children here run
    only kernelevo's functions. A script that judges without an
    `if __name__ == "__main__":` guard would judge again inside the child,
    which then dies before its log is open. The lock keeps two starting
    threads from restoring each other's stand-in.
    """
    with _start_lock:
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            if main is not None:
                sys.modules["__main__"] = main


class Deadline:
    """A job's wall-clock limit, which a job waiting for work restarts, and its process.

    A caller that gives up on a job from another thread (interrupted) kills it here.
    """

    def __init__(self) -> None:
        self.at = float("inf")
        self.pid: int | None = None
        self.marker = ""
        self.sentinel: int | None = None  # readable once the job's process has ended
        self.over = False  # run_job has returned (the sentinel is closed, its number reused)

    def restart(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def kill(self) -> None:
        if self.pid and not self.over:  # once over, the pid may be another process's
            _end_job(self.pid)

    def ended(self) -> bool:
        """Whether the job's process has ended (a judge holding its question can stop waiting)."""
        sentinel = self.sentinel
        if self.over or sentinel is None:
            return self.over
        try:
            return bool(multiprocessing.connection.wait([sentinel], 0))
        except (OSError, ValueError):  # closed: the job is over
            return True


def _name_process(marker: str) -> None:
    """`ps` and `top` show the job's kind ("ke-run_worker"), not the forkserver's command."""
    try:
        with open("/proc/self/comm", "w") as handle:
            handle.write(f"ke-{marker.rsplit('-', 1)[0]}"[:15])
    except OSError:
        pass  # no /proc in this root: the name stays


def _child_main(target: Callable[..., None], payload: dict[str, Any], connection: Any,
                lifeline: Any, scratch: str, log_path: str, marker: str,
                environment: dict[str, str], isolate_network: bool,
                plan: confine.Plan) -> None:
    """Entry point in the forked child: detach, confine, redirect output, run."""
    started_at = time.time()
    os.setsid()
    namespaces.undumpable()  # the guard forked next, too
    # Bytecode of what the forkserver imported may be cached (cache_dir.py);
    # a candidate's own modules, each in a new folder, would only pile up there.
    sys.dont_write_bytecode = True
    release_forkserver()
    guard = start_guard(lifeline, marker)
    lifeline.close()
    die_with_parent()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    network = confine.unshare_network() if isolate_network else "shared (not asked)"
    layers, kept = confine.confine(plan)  # from here on, in the worker a keeper holds
    if kept:
        guard = 0  # the keeper's child, which the keeper ends
    # The judge's environment as of this job (the forkserver's is as of its
    # start), before anything opens CUDA: CUDA_VISIBLE_DEVICES among it.
    os.environ.clear()
    os.environ.update(environment)
    os.environ[MARKER_ENV] = marker
    # Off the cores the judge keeps for timing, before the job starts any
    # thread or process: they inherit it (a timing pins itself back on).
    keep_off_timing_cores(environment)
    _name_process(marker)
    # The candidate's working folder is apart from the harness's files, so
    # anything that appears in it was written by the candidate.
    workdir = os.path.join(scratch, "work")
    os.environ["TMPDIR"] = os.path.join(workdir, "tmp")
    os.makedirs(os.environ["TMPDIR"], exist_ok=True)
    # Imports in the forkserver may have asked for the temporary folder,
    # which tempfile then keeps: make it look again, and find TMPDIR.
    tempfile.tempdir = None
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    os.chdir(workdir)
    channel = Channel(connection)
    preload = sys.modules.get("kernelevo.evaluate.child.preload")
    channel.send("isolation", network=network, layers=layers, started_at=started_at,
                 preloaded_at=getattr(preload, "READY_AT", 0.0),
                 setup_s=round(time.time() - started_at, 4))
    try:
        target(payload, channel)
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        if guard:
            stop_guard(guard)  # reaped here, not left a zombie for init
        # Every bundle has been read by now (the judge replies to each once done with it):
        # the CUDA IPC reference counts the exit below would leave in /dev/shm.
        transfer = sys.modules.get("kernelevo.evaluate.shared.transfer")
        if transfer is not None:
            transfer.remove_count_files()
    os._exit(0)


def run_job(target: Callable[..., None], payload: dict[str, Any], scratch: Path,
            timeout_s: float, output_limit_bytes: int,
            on_message: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
            environment: dict[str, str] | None = None,
            isolate_network: bool = True, deadline: Deadline | None = None) -> JobResult:
    """Run `target(payload, channel)` in a sandboxed child and collect its messages.

    `on_message` sees each message; a dict it returns is sent back as the reply
    (for messages sent with Channel.ask). `deadline`, when given, is the job's
    limit (set to `timeout_s` from now), which `on_message` may restart.
    """
    if _stopping.is_set():
        raise JobsStopped("the judge is stopping: no new evaluation starts")
    context = _forkserver_context()
    _ensure_forkserver()
    scratch.mkdir(parents=True, exist_ok=True)
    log_path = scratch / "output.log"
    # The job's kind leads its marker, so a machine's processes can be told
    # apart by what they do (bench/cpu_by_role.py).
    marker = f"{getattr(target, '__name__', 'job')}-{uuid.uuid4().hex}"
    parent_end, child_end = context.Pipe()
    lifeline_read, lifeline_hold = context.Pipe(duplex=False)
    child_environment = allowed.candidate_environment({**os.environ, **(environment or {})})
    # CUDA IPC hands a GPU worker's outputs over: reference counts in /dev/shm.
    cuda = payload.get("device") == "cuda" and child_environment.get("CUDA_VISIBLE_DEVICES") != ""
    plan = confine.plan_for(scratch, child_environment, str(payload.get("task_folder", "")), cuda)
    if plan.enabled:
        namespaces.undumpable()  # the judge, its API key in its environment
    secrets = redact.secret_values(os.environ, [default_cache_dir()])
    process = context.Process(
        target=_child_main,
        args=(target, payload, child_end, lifeline_read, str(scratch), str(log_path), marker,
              child_environment, isolate_network, plan),
        daemon=False,
    )
    result = JobResult()
    start = time.monotonic()
    deadline = deadline or Deadline()
    deadline.restart(timeout_s)
    with _main_module_hidden():
        process.start()
    with _live_lock:
        _live_jobs[process.pid] = marker
    quiet.register(process.pid, deadline)  # held at once while a timing asks for quiet
    deadline.pid, deadline.marker = process.pid, marker
    deadline.sentinel, deadline.over = process.sentinel, False
    if _stopping.is_set():  # told to stop while this one was starting
        _end_job(process.pid)
    child_end.close()
    lifeline_read.close()
    try:
        pump(process, parent_end, result, deadline, log_path,
              output_limit_bytes, on_message, secrets)
    finally:
        with _live_lock:
            _live_jobs.pop(process.pid, None)
        result.stood_s = quiet.unregister(process.pid)  # a stopped job could not end
        # A process killed mid-kernel keeps its GPU context until the driver
        # has torn it down, which can take seconds: the next job must not
        # share the GPU with it, so wait for the exit (bounded).
        waited = time.monotonic()
        _stop(process, marker)
        result.exit_wait_s = time.monotonic() - waited
        deadline.over, deadline.sentinel = True, None
        parent_end.close()
        lifeline_hold.close()
    result.exit_code = process.exitcode
    result.wall_s = time.monotonic() - start
    result.log_tail = redact.redact(read_tail(log_path), secrets)
    return result


def _end_job(pid: int) -> None:
    """Ask the job's keeper to kill every process of the job (and then end itself)."""
    quiet.ending(pid)  # continued first: a stopped keeper would not hear it
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)


def _stop(process: Any, marker: str) -> None:
    """End the job, wait for its first process; kill what a keeper did not end in time."""
    if process.exitcode is None:
        _end_job(process.pid)
        process.join(_KEEPER_GRACE_S)
    # Only a pid not yet reaped is signalled: a reaped one may be another process's by now.
    _kill_group(process.pid if process.exitcode is None else None, marker)
    process.join(_EXIT_WAIT_S)


def _kill_group(pid: int | None, marker: str) -> None:
    """Kill the child's process group, then any stray process carrying its marker."""
    if pid:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    kill_marked(marker)


def read_tail(path: Path, limit_bytes: int = 8000) -> str:
    """The last `limit_bytes` of a log, decoded leniently."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit_bytes))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""
