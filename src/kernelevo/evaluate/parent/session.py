"""One evaluation's processes: the oracle and the worker, started before the candidates are known.

A `Session` starts the reference oracle and the candidate worker at once. The
worker imports the task and warms the baselines, then asks for its
candidates; the session answers once `run()` gives it some and the
oracle's reference exists. A judge with standby on starts the next session
as soon as one has warmed up (as one begins, once a standby was used), so a
new candidate finds both processes warm: the seeds are still drawn before the
candidate is known, and each candidate still runs in a fresh process.

Each session holds its GPU's gate (gate.py): shared while it runs kernels
to warm up and check, released while it waits for work, exclusive while it
times. A child asks for its shared hold once it has imported the task and
made its CUDA context (no kernels), so those overlap a timing phase.
`kill_sessions(judge)` ends a judge's sessions from another thread (a job
whose client left): their processes die and their waits give up.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import shutil
import tempfile
import threading
import time
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from kernelevo.candidate import Candidate
from kernelevo.errors import MessageError
from kernelevo.evaluate.child.worker import run_worker
from kernelevo.evaluate.parent.gate import GateAbandoned, Hold, gate_for
from kernelevo.evaluate.parent.host import JudgeHost
from kernelevo.evaluate.parent.oracle_run import OracleRun, wait_for
from kernelevo.evaluate.parent.outcome import build_verdicts
from kernelevo.evaluate.parent.worker_state import WorkerState
from kernelevo.evaluate.sandbox import quiet
from kernelevo.evaluate.sandbox.jobs import Deadline, run_job, stopping
from kernelevo.evaluate.sandbox.pipe import JobResult
from kernelevo.evaluate.sandbox.quiet_load import QuietLoad
from kernelevo.evaluate.shared.gradients import backward_on
from kernelevo.evaluate.shared.messages import (WORKER_KINDS, BaselineTimes, Checked, CpuWork, Gpu,
                                                HostQuiet, Isolation, Message, Ready,
                                                StoredBaselines, Timed, Timing, WorkerJob, decode)
from kernelevo.evaluate.shared.replies import (Abort, BaselinesReply, Granted, QuietReply,
                                               ReadyReply, TimeThese)
from kernelevo.evaluate.verdict import Verdict, verdict_for
from kernelevo.task import Task

_POLL_S = 0.25  # how often a waiting worker looks whether the process is stopping
_live: "weakref.WeakSet[Session]" = weakref.WeakSet()
_numbers = itertools.count(1)  # each session's number, in its holds' labels
_live_lock = threading.Lock()


def kill_sessions(judge: JudgeHost) -> int:
    """Kill every session of `judge` (running or standby); how many there were."""
    with _live_lock:
        sessions = [session for session in _live if session.judge is judge]
    for session in sessions:
        session.kill()
    return len(sessions)


class Session:
    """The oracle and the worker of one evaluation of `task` by `judge`."""

    def __init__(self, judge: JudgeHost, task: Task, time_them: bool,
                 ahead: tuple[str, Callable[["Session"], None]] | None = None,
                 yield_to: "Session | None" = None) -> None:
        self.judge, self.task, self.time_them = judge, task, time_them
        # (when, what): called with this session once the worker is "warm"
        # (waits for candidates) or has "checked" its candidates (before timing)
        self._ahead = ahead
        self.scratch = Path(tempfile.mkdtemp(prefix="kernelevo-"))
        gate = gate_for(judge.device, judge.gpu_index)
        self.deadline = Deadline()
        self.killed = threading.Event()
        self.state: WorkerState | None = None
        self.result: JobResult | None = None
        self.error: BaseException | None = None
        self._given = threading.Event()
        self.warm = threading.Event()  # set once the worker has warmed up and waits
        # Set once this session needs the GPU alone no more: timed, nothing to
        # time, or ended. A standby started beside it runs its warm-up's
        # kernels only then (or once given candidates itself): else that
        # warm-up holds the GPU when this one is ready to time (gate_wait).
        self.past_timing = threading.Event()
        self._yield = _Yield(yield_to, self._given, self.abandoned)
        # "N:task:worker", "N:recheck:oracle": who held the GPU while a timing waited.
        self.number = next(_numbers)
        self.recheck = task is not getattr(judge, "task", None)  # a re-check at other sizes
        label = f"{self.number}:{'recheck' if self.recheck else 'task'}"
        self.oracle = OracleRun(judge, task, self.scratch / "oracle",
                                 Hold(gate, self.abandoned, f"{label}:oracle"), self._yield)
        self.hold = Hold(gate, self.abandoned, f"{label}:worker")
        # A worker holding the GPU alone is never stood still for another's timing
        self.hold.on_exclusive = self._alone
        # what still ran while this worker's calls were timed with the others still
        self._quiet_load = QuietLoad.for_children(judge.child_environment)
        self.hold.about = self.oracle.hold.about = self._about
        self._closed = False
        self._discarded = False  # nobody waits for its verdicts (discard())
        self._ready_heard = False  # from the worker's Ready on, its candidates may run
        self._timing_baselines = False  # told to time the baselines for the store
        self._yielded_s: float | None = None
        # The worker process's own start, before its first step (start_steps())
        self._asked_at = 0.0
        self._start_steps: dict[str, float] = {}
        self._isolation_heard = False
        self._last_message = time.monotonic()
        # When the caller's wait passed each milestone (PATH), from `run()` on
        self._marks: dict[str, float] = {}
        # A message from the worker that was JSON but not one of the harness's own
        # (a candidate writing to the channel): the job ends with that verdict.
        self.malformed: str | None = None
        self._threads = [threading.Thread(target=self._reference, name="kernelevo-oracle",
                                          daemon=True),
                         threading.Thread(target=self._work, name="kernelevo-worker",
                                          daemon=True)]
        with _live_lock:
            _live.add(self)
        for thread in self._threads:
            thread.start()

    def abandoned(self) -> bool:
        """Whether this session's waits should give up: it was killed or the process stops."""
        return self.killed.is_set() or stopping()

    def _about(self) -> str:
        """What this session is doing, for the log of a timing that waits long on its hold."""
        doing = ("discarded" if self._discarded else "killed" if self.killed.is_set()
                 else "judging its candidates"
                 if self._given.is_set() and self.state is not None
                 else "warm, waiting for candidates" if self.warm.is_set()
                 else "warming up, not yet given candidates")
        return (f"task {self.task.name}, {doing}"
                + (", past its timing" if self.past_timing.is_set() else ""))

    def alive(self) -> bool:
        """Whether the worker still waits for candidates (it may have died waiting)."""
        return (self._threads[1].is_alive() and self.oracle.error is None
                and not self.deadline.ended())

    def run(self, candidates: list[Candidate]) -> list[Verdict]:
        """Hand the candidates to the worker and wait for their verdicts."""
        self.state = WorkerState(self.judge, candidates, self.oracle, self.time_them)
        self.state.off_gpu = self._off_gpu
        self._marks["given"] = time.monotonic()
        self._given.set()
        try:
            for thread in self._threads:
                thread.join()
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): the children go now
            self.kill()
            raise
        self._marks["done"] = time.monotonic()
        self.state.phases.update(path_phases(self._marks))
        if self.malformed is not None:  # whatever failed after it: the session was killed
            return [verdict_for("harness_tampered", "the worker's channel to the judge carried "
                                f"a message the harness never sends ({self.malformed}): "
                                "something in the candidate's process wrote to it")
                    for _ in candidates]
        if self.error is not None:
            raise self.error
        if self.oracle.error is not None:
            raise self.oracle.error
        assert self.result is not None
        self.state.phases.update(self.oracle.phases)
        if self._yielded_s is not None:  # a standby's warm-up, behind the evaluation it stood by
            self.state.phases["warmup_yield"] = self._yielded_s
        self.state.phases.update(self._start_steps)
        return build_verdicts(self.state, self.result, self.judge)

    def kill(self) -> None:
        """Kill both processes at once (close() then only waits for their threads)."""
        self.killed.set()
        self.deadline.kill()
        self.oracle.deadline.kill()

    def discard(self) -> None:
        """End a session nobody needs: killed now, closed in a thread (its processes go).

        From now on it answers no message of its children: the next one ends
        its jobs, and its holds on the GPU go with them (killed, a session
        kept answering, and its shared hold kept the timings waiting, until
        its jobs ended).
        """
        if self._closed:
            return
        self._discarded = True
        self.kill()
        threading.Thread(target=self.close, name="kernelevo-discard-session", daemon=True).start()

    def close(self) -> None:
        """Tell an unused worker to stop, wait for both processes, remove the scratch."""
        if self._closed:
            return
        self._closed = True
        self._given.set()  # with no state given, the worker is told to abort
        for thread in self._threads:
            thread.join()
        shutil.rmtree(self.scratch, ignore_errors=True)
        with _live_lock:
            _live.discard(self)

    def _reference(self) -> None:
        self.oracle.run()
        if self.oracle.error is not None:
            # No reference, no verdict: the worker goes now, not at its own limit (a task
            # that hangs at import hangs the worker's import too).
            self.deadline.kill()

    def _work(self) -> None:
        judge = self.judge
        payload = WorkerJob(task_source=self.task.source, device=judge.device,
                            dtype=judge.config.dtype_name, scratch=str(self.scratch / "worker"),
                            time=self.time_them, timing=judge.config.timing,
                            task_folder=self.task.folder, rotation=not self.recheck,
                            backward=backward_on(self.task, judge.config)).to_json()
        self._asked_at = time.time()  # wall clock: the child's stamps are of another process
        try:
            self.result = run_job(run_worker, payload, self.scratch / "worker",
                                  judge.config.timeout_s, judge.config.output_limit_bytes,
                                  on_message=self._on_message,
                                  environment=judge.child_environment,
                                  isolate_network=judge.config.isolate_network,
                                  deadline=self.deadline)
            if self.state is not None:  # from its last message to its end (a context torn down)
                self.state.phases["exit"] = time.monotonic() - self._last_message
                if self.result.stood_s:  # while other jobs' calls were timed
                    self.state.phases["stood_still"] = self.result.stood_s
                self._quiet_load.end()
                self.state.phases.update(self._quiet_load.phases())
        except BaseException as exc:  # raised in the caller's thread by run()
            self.error = exc
        finally:
            self.hold.release()
            self.past_timing.set()

    def _on_message(self, raw: dict[str, Any]) -> dict[str, Any] | None:
        if self._discarded:
            raise GateAbandoned("the session was discarded: nobody waits for its verdicts")
        self._last_message = time.monotonic()
        try:
            message = decode(raw, WORKER_KINDS)
            if self._ready_heard and isinstance(message, (StoredBaselines, BaselineTimes)):
                # Only the warm-up, before any candidate loads, speaks of the store
                raise MessageError(f"a {message.kind} message after the worker's ready")
        except MessageError as exc:
            if self.malformed is None:
                self.malformed = str(exc)[:300]
            self.kill()  # nothing the worker says from here on can be trusted
            return None
        reply = self._answer(message)
        return None if reply is None else reply.to_json()

    def _answer(self, message: Message) -> Message | None:
        if isinstance(message, Isolation):  # the sandbox's first word: how the start went
            if not self._isolation_heard:  # sent before any candidate's code ran; not again
                self._isolation_heard = True
                self._start_steps = start_steps(message, self._asked_at)
            return None
        if isinstance(message, Gpu):  # about to run kernels (the warm-up): shared with others
            # A standby's brief kernels (its model and inputs made) go at once;
            # a longer warm-up waits for the evaluation beside it to time.
            waited = None if message.brief else self._yield.wait(self.deadline)
            if waited is not None:
                self._yielded_s = (self._yielded_s or 0.0) + waited
            self._wait_for(self.hold.shared)
            return Granted()
        if isinstance(message, CpuWork):  # the warm-up's compile: no kernels, no hold
            if not self._ready_heard:  # a candidate's process keeps its hold
                self.hold.release()
            return Granted()
        if isinstance(message, HostQuiet):  # its calls timed next (on) or timed
            return self._host_quiet(message.on)
        if isinstance(message, StoredBaselines):
            return self._stored_baselines()
        if isinstance(message, BaselineTimes):
            if self._timing_baselines and self.judge.baseline_store is not None:
                self.judge.baseline_store.put(self.judge.baseline_key, message.measures,
                                              message.notes)
            self._timing_baselines = False
            self._wait_for(self.hold.shared)  # the rest of the warm-up shares the GPU
            return Granted()
        if isinstance(message, Ready):
            self._ready_heard = True
            return self._ready(message)
        if self.state is None:
            return None  # progress of a warm-up nobody waits for yet
        if isinstance(message, Timed):  # timing done; profiling next: checks elsewhere may run
            self._marks.setdefault("timed", time.monotonic())
            # Shared at once: taken again, the hold waited behind every timing queued
            # meanwhile, about 2 s of each row's path in a suite of six lanes on an H100.
            self.hold.downgrade()
            self.past_timing.set()
            return Granted()
        if (isinstance(message, Timing) and message.baselines == "drifted"
                and self.judge.baseline_store is not None):
            self.judge.baseline_store.discard(self.judge.baseline_key)  # the next worker re-times
        reply = self.state.on_message(message)
        if isinstance(message, Checked) and isinstance(reply, TimeThese):
            self._marks.setdefault("checked", time.monotonic())
            self.hold.release()
            self._call_ahead("checked")
            # Timing runs alone on the GPU. A CPU worker times nothing: waiting
            # for the gate there only made a job wait out a hung one beside it.
            if reply.time and self.judge.device == "cuda":
                self.state.phases["gate_wait"] = self._wait_for(self.hold.exclusive)
                self._marks.setdefault("gate", time.monotonic())
                self.state.phases.update(self._waited_on(self.hold.waited_on))
            else:
                self.past_timing.set()
        return reply

    def _stored_baselines(self) -> BaselinesReply:
        """The task's stored baseline times; none stored, the GPU held alone to time them."""
        store = self.judge.baseline_store
        if store is None or self.task is not self.judge.task:
            return BaselinesReply()
        stored = store.get(self.judge.baseline_key)
        if stored is not None:
            return BaselinesReply(stored.measures, stored.measured_at, stored.notes)
        self.hold.release()
        # Behind every candidate's timing waiting meanwhile, their verdicts due first,
        # while nobody waits for this session; once it has candidates, a verdict does.
        # (Behind them throughout, a suite's lanes waited 10.5 s a row for these
        # timings on a fresh H100, up to 141 s: bench/RESULTS.md.)
        self._wait_for(lambda: self.hold.exclusive(urgent=self._given.is_set))
        self._timing_baselines = True
        return BaselinesReply(time_them=True)

    def _host_quiet(self, on: bool) -> QuietReply:
        """The judge's other jobs stood still while this worker times its calls
        (sandbox/quiet.py): only while it holds the GPU alone, and only once its timing
        asks; going back to shared (or none) ends it too."""
        pid = self.deadline.pid
        if pid is None or not on or self.hold.state != "exclusive":
            self._quiet_load.end()  # before the others go on
            return QuietReply(cut_s=quiet.release(pid) if pid is not None else 0.0)
        held = quiet.hold_others(pid)
        self._quiet_load.start()  # what runs from here is what the quiet leaves
        return QuietReply(held=held)

    def _alone(self, alone: bool) -> None:
        """The worker's hold on the GPU became exclusive, or stopped being so (its quiet
        ends with it: quiet.timing)."""
        if not alone:
            self._quiet_load.end()
        quiet.timing(self.deadline.pid, alone)

    @contextmanager
    def _off_gpu(self) -> Iterator[None]:
        """A decision on the CPU: the worker waits for it and runs no kernel, so a shared
        hold goes meanwhile and is taken again after; a timing waiting goes first."""
        if self.hold.state != "shared":
            yield
            return
        self.hold.release()
        try:
            yield
        finally:
            self._wait_for(self.hold.shared)

    def _wait_for(self, take: Callable[[], None]) -> float:
        return wait_for(take, self.deadline)

    def _waited_on(self, holders: dict[str, float]) -> dict[str, float]:
        """Who held the GPU while this timing waited, as phases: gate_wait_own_oracle (this
        session's), gate_wait_recheck_worker (the re-check beside it), gate_wait_next_worker
        (another session of the task: a standby), gate_wait_judge (its comparisons)."""
        phases: dict[str, float] = {}
        for label, seconds in holders.items():
            parts = label.split(":")
            if len(parts) == 3:
                whose = ("own" if parts[0] == str(self.number)
                         else "recheck" if parts[1] == "recheck" else "next")
                label = f"{whose}_{parts[2]}"
            key = f"gate_wait_{label}"
            phases[key] = round(phases.get(key, 0.0) + seconds, 3)
        return phases

    def _call_ahead(self, when: str) -> None:
        if self._ahead is not None and self._ahead[0] == when:
            self._ahead[1](self)

    def _ready(self, message: Ready) -> ReadyReply | Abort:
        self.hold.release()  # idle until candidates come: others may time meanwhile
        self.warm.set()
        self._call_ahead("warm")
        while not self._given.wait(_POLL_S):
            if self.abandoned() or self.deadline.ended():  # the worker died waiting: its job ends
                return Abort()
        if self.state is None:
            return Abort()
        reply = self.state.on_message(message)
        if not isinstance(reply, ReadyReply):
            return Abort()
        started = time.monotonic()
        self.hold.shared()  # behind the timings on the GPU and those waiting for it
        self.state.phases["ready_gate_wait"] = time.monotonic() - started
        self.deadline.restart(self.judge.config.timeout_s)
        self._marks.setdefault("ready", time.monotonic())
        return dataclasses.replace(reply, candidates=tuple(
            {"source": c.source, "backend": c.backend} for c in self.state.candidates))


def start_steps(message: Isolation, asked_at: float) -> dict[str, float]:
    """A worker's start before its first step, from its sandbox's first message: the
    wait for the forkserver's imports (a child forked only once they are done), the
    fork and the child's start up to its code, and the sandbox's set-up. Wall-clock
    stamps of two processes on one machine; none where the child sent none."""
    stamps = (message.started_at, message.preloaded_at, message.setup_s, asked_at)
    if not message.started_at or not asked_at or not all(map(math.isfinite, stamps)):
        return {}
    forked_after = max(asked_at, message.preloaded_at)
    return {"warmup_forkserver_wait": round(max(0.0, forked_after - asked_at), 4),
            "warmup_process_start": round(max(0.0, message.started_at - forked_after), 4),
            "warmup_sandbox": round(max(0.0, message.setup_s), 4)}


# The milestones of an evaluation as its caller waits for it, in order: the
# candidates given, the worker warm and handed them, their checks done, the GPU
# held alone, the timing done, both processes ended. The time between two
# milestones that were passed is a phase of the caller's path (a suite lane's
# row): what the evaluation waited on, where the verdict's other phases are
# the processes' own work, which overlaps.
PATH = (("given", ""), ("ready", "path_warmup_left"), ("checked", "path_checks"),
        ("gate", "path_gate_wait"), ("timed", "path_timing"), ("done", "path_to_exit"))


def path_phases(marks: dict[str, float]) -> dict[str, float]:
    """Seconds between each milestone passed and the one before it (PATH's names)."""
    phases: dict[str, float] = {}
    last = None
    for mark, name in PATH:
        if mark not in marks:
            continue
        if last is not None:
            phases[name] = round(max(0.0, marks[mark] - last), 4)
        last = marks[mark]
    return phases


class _Yield:
    """A standby's wait, before its first kernels, for the session it stands beside.

    It ends once that session needs the GPU alone no more, or once this
    standby is given candidates (a job waits for it now), or the judge stops.
    """

    def __init__(self, beside: "Session | None", given: threading.Event,
                 abandoned: Callable[[], bool]) -> None:
        self.beside, self.given, self.abandoned = beside, given, abandoned
        self.waiting = threading.Event()  # set once a child waited here

    def wait(self, deadline: Deadline) -> float | None:
        """Seconds waited (not counted against the job's limit); None with nothing to wait for."""
        if self.beside is None or self.beside.past_timing.is_set() or self.given.is_set():
            return None
        self.waiting.set()
        started = time.monotonic()
        while not self.beside.past_timing.wait(0.02):
            if self.given.is_set() or self.abandoned():
                break
        waited = time.monotonic() - started
        deadline.at += waited
        return waited
