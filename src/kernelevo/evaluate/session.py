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
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable

import torch

from kernelevo.candidate import Candidate
from kernelevo.config import tolerances
from kernelevo.errors import TaskError
from kernelevo.evaluate import decide
from kernelevo.evaluate.gate import Hold, gate_for
from kernelevo.evaluate.messages import (ORACLE_KINDS, WORKER_KINDS, Abort, Checked, CpuWork,
                                         Gpu, Granted, Message, MessageError, OracleDone, OracleJob,
                                         Progress, Ready, ReadyReply, Reference, TaskFailed,
                                         Timed, TimeThese, WorkerJob, decode)
from kernelevo.evaluate.oracle import run_oracle
from kernelevo.evaluate.outcome import build_verdicts
from kernelevo.evaluate.sandbox.jobs import Deadline, JobResult, run_job, stopping
from kernelevo.evaluate.transfer import import_bundle
from kernelevo.evaluate.verdict import Verdict, verdict_for
from kernelevo.evaluate.worker import run_worker
from kernelevo.evaluate.worker_state import WorkerState
from kernelevo.task import Task

_POLL_S = 0.25  # how often a waiting worker looks whether the process is stopping
_live: "weakref.WeakSet[Session]" = weakref.WeakSet()
_numbers = itertools.count(1)  # each session's number, in its holds' labels
_live_lock = threading.Lock()


def kill_sessions(judge: Any) -> int:
    """Kill every session of `judge` (running or standby); how many there were."""
    with _live_lock:
        sessions = [session for session in _live if session.judge is judge]
    for session in sessions:
        session.kill()
    return len(sessions)


class Session:
    """The oracle and the worker of one evaluation of `task` by `judge`."""

    def __init__(self, judge: Any, task: Task, time_them: bool,
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
        label = f"{self.number}:{'task' if task is getattr(judge, 'task', None) else 'recheck'}"
        self.oracle = _OracleRun(judge, task, self.scratch / "oracle",
                                 Hold(gate, self.abandoned, f"{label}:oracle"), self._yield)
        self.hold = Hold(gate, self.abandoned, f"{label}:worker")
        self._closed = False
        self._ready_heard = False  # from the worker's Ready on, its candidates may run
        self._yielded_s: float | None = None
        self._last_message = time.monotonic()
        # A message from the worker that was JSON but not one of the harness's own
        # (a candidate writing to the channel): the job ends with that verdict.
        self.malformed: str | None = None
        self._threads = [threading.Thread(target=self.oracle.run, name="kernelevo-oracle",
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

    def alive(self) -> bool:
        """Whether the worker still waits for candidates (it may have died waiting)."""
        return (self._threads[1].is_alive() and self.oracle.error is None
                and not self.deadline.ended())

    def run(self, candidates: list[Candidate]) -> list[Verdict]:
        """Hand the candidates to the worker and wait for their verdicts."""
        self.state = WorkerState(self.judge, candidates, self.oracle, self.time_them)
        self._given.set()
        try:
            for thread in self._threads:
                thread.join()
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): the children go now
            self.kill()
            raise
        if self.error is not None:
            raise self.error
        if self.malformed is not None:
            return [verdict_for("harness_tampered", "the worker's channel to the judge carried "
                                f"a message the harness never sends ({self.malformed}): "
                                "something in the candidate's process wrote to it")
                    for _ in candidates]
        if self.oracle.error is not None:
            raise self.oracle.error
        assert self.result is not None
        self.state.phases.update(self.oracle.phases)
        if self._yielded_s is not None:  # a standby's warm-up, behind the evaluation it stood by
            self.state.phases["warmup_yield"] = self._yielded_s
        return build_verdicts(self.state, self.result, self.judge)

    def kill(self) -> None:
        """Kill both processes at once (close() then only waits for their threads)."""
        self.killed.set()
        self.deadline.kill()
        self.oracle.deadline.kill()

    def discard(self) -> None:
        """End a session nobody needs: killed now, closed in a thread (its processes go)."""
        if self._closed:
            return
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

    def _work(self) -> None:
        judge = self.judge
        payload = WorkerJob(task_source=self.task.source, device=judge.device,
                            dtype=judge.config.dtype_name, scratch=str(self.scratch / "worker"),
                            time=self.time_them, timing=judge.config.timing,
                            task_folder=self.task.folder).to_json()
        try:
            self.result = run_job(run_worker, payload, self.scratch / "worker",
                                  judge.config.timeout_s, judge.config.output_limit_bytes,
                                  on_message=self._on_message,
                                  environment=judge.child_environment,
                                  isolate_network=judge.config.isolate_network,
                                  deadline=self.deadline)
            if self.state is not None:  # from its last message to its end (a context torn down)
                self.state.phases["exit"] = time.monotonic() - self._last_message
        except BaseException as exc:  # raised in the caller's thread by run()
            self.error = exc
        finally:
            self.hold.release()
            self.past_timing.set()

    def _on_message(self, raw: dict[str, Any]) -> dict[str, Any] | None:
        self._last_message = time.monotonic()
        try:
            message = decode(raw, WORKER_KINDS)
        except MessageError as exc:
            if self.malformed is None:
                self.malformed = str(exc)[:300]
            self.kill()  # nothing the worker says from here on can be trusted
            return None
        reply = self._answer(message)
        return None if reply is None else reply.to_json()

    def _answer(self, message: Message) -> Message | None:
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
        if isinstance(message, Ready):
            self._ready_heard = True
            return self._ready(message)
        if self.state is None:
            return None  # progress of a warm-up nobody waits for yet
        if isinstance(message, Timed):  # timing done; profiling next: checks elsewhere may run
            self._wait_for(self.hold.shared)
            self.past_timing.set()
            return Granted()
        reply = self.state.on_message(message)
        if isinstance(message, Checked) and isinstance(reply, TimeThese):
            self.hold.release()
            self._call_ahead("checked")
            # Timing runs alone on the GPU. A CPU worker times nothing: waiting
            # for the gate there only made a job wait out a hung one beside it.
            if reply.time and self.judge.device == "cuda":
                self.state.phases["gate_wait"] = self._wait_for(self.hold.exclusive)
                self.state.phases.update(self._waited_on(self.hold.waited_on))
            else:
                self.past_timing.set()
        return reply

    def _wait_for(self, take: Callable[[], None]) -> float:
        return _wait_for(take, self.deadline)

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
        self.hold.shared()
        self.deadline.restart(self.judge.config.timeout_s)
        return dataclasses.replace(reply, candidates=tuple(
            {"source": c.source, "backend": c.backend} for c in self.state.candidates))


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


def _wait_for(take: Callable[[], None], deadline: Deadline) -> float:
    """Take a hold on the gate; the wait does not count against the job's limit."""
    waited = time.monotonic()
    take()
    waited = time.monotonic() - waited
    deadline.at += waited
    return waited


def _check_trivial_answers(reference: dict[str, Any], device: str) -> None:
    """Which trivial answers would pass, found while the worker still warms up.

    A passing verdict needs it; done here it is off the candidate's path, and
    it loads the comparison's kernels into this process ahead (0.5-0.8 s of a
    cold `kernelevo eval` otherwise). Short of GPU memory, the judge finds it
    later, on the CPU if need be (outcome.py).
    """
    try:
        reference["trivial"] = (decide.trivial_answers_pass(
            reference["outputs"], reference["tolerances"], device) + reference["passthrough"])
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()


class _OracleRun:
    """Computes the reference in its own process; the judge keeps the outputs.

    `ready` is set once the reference is here (or cannot come), as the
    oracle's last message arrives: the worker goes on while the oracle's
    process exits and the judge checks which trivial answers pass. `done` is
    set once that check is done too.
    """

    def __init__(self, judge: Any, task: Task, scratch: Path, hold: Hold,
                 yielding: "_Yield") -> None:
        self.judge, self.task, self.scratch, self.hold = judge, task, scratch, hold
        self._yield = yielding
        self.deadline = Deadline()
        self.ready = threading.Event()
        self.done = threading.Event()
        self.reference: dict[str, Any] | None = None
        self.error: Exception | None = None
        self.phases: dict[str, float] = {}  # judge-side steps after the reference came
        self._bundle: dict[str, list[Any]] | None = None
        self._job: OracleJob | None = None
        self._done_at: float | None = None

    def run(self) -> None:
        try:
            try:  # the child asks for a shared hold before it runs kernels
                self._compute()
                self.ready.set()
                assert self.reference is not None
                started = time.monotonic()
                _check_trivial_answers(self.reference, self.judge.compare_device)
                self.phases["trivial_check"] = time.monotonic() - started
            finally:
                self.hold.release()
        except Exception as exc:  # handed to the judge's thread, raised there
            kept = (TaskError, torch.cuda.OutOfMemoryError)  # the judge makes a verdict of OOM
            self.error = exc if isinstance(exc, kept) else TaskError(
                f"the reference oracle failed: {type(exc).__name__}: {exc}")
            self.reference = None
        finally:
            self.ready.set()
            self.done.set()

    def _compute(self) -> None:
        config, count = self.judge.config, self.judge.config.input_sets
        # One set is a stress set (scaled by s in [32, 128], structure kept) so
        # shortcuts that only hold for the task's input distribution fail:
        # randn inputs then reach beyond 100, where exp() without a max
        # subtraction overflows.
        variant_scale = 2 ** (5 + secrets.randbelow(2000) / 1000)
        self._job = OracleJob(
            task_source=self.task.source, device=self.judge.device, dtype=config.dtype_name,
            scratch=str(self.scratch), task_folder=self.task.folder,
            seeds=tuple(secrets.randbits(62) for _ in range(count)),
            variants=(None,) * (count - 1) + (variant_scale,))
        result = run_job(run_oracle, self._job.to_json(), self.scratch, config.timeout_s,
                         config.output_limit_bytes, on_message=self._on_message,
                         environment=self.judge.child_environment,
                         isolate_network=config.isolate_network, deadline=self.deadline)
        if self._done_at is not None:  # from its last message until its process had ended
            self.phases["oracle_exit"] = time.monotonic() - self._done_at
        if self.reference is None:
            _raise_oracle_failure(result)

    def _on_message(self, raw: dict[str, Any]) -> dict[str, Any] | None:
        reply = self._answer(decode(raw, ORACLE_KINDS))
        return None if reply is None else reply.to_json()

    def _answer(self, message: Message) -> Message | None:
        if isinstance(message, Gpu):
            self._yield.wait(self.deadline)
            _wait_for(self.hold.shared, self.deadline)
            return Granted()
        if isinstance(message, Progress):
            self.judge.progress(message.phase)
        elif isinstance(message, Reference):
            self._bundle = import_bundle(message.bundle, self.judge.compare_device,
                                         self.judge.gpu_index)
            return Granted()
        elif isinstance(message, OracleDone) and self._bundle is not None:
            # The last message: the worker may go on while this process exits.
            self._done_at = time.monotonic()
            assert self._job is not None
            self.reference = self._reference_from(message, self._job)
            self.ready.set()
        return None

    def _reference_from(self, final: OracleDone, job: OracleJob) -> dict[str, Any]:
        assert self._bundle is not None
        kept = final.kept_sets
        outputs = [self._bundle[f"set_{i}"] for i in range(len(kept))]
        return {
            "outputs": outputs,
            "seeds": [job.seeds[i] for i in kept],
            "variants": list(final.variants_used),
            "stress": {int(k): v for k, v in final.stress.items()},
            "passthrough": list(final.passthrough),
            "structure": final.structure,
            "ops": set(final.ops),
            "flops": int(final.flops), "bytes": int(final.bytes),
            "tolerances": [tolerances(name, final.atol, final.rtol, self.judge.config)
                           for name in final.output_dtypes],
        }


def _raise_oracle_failure(result: JobResult) -> None:
    """The TaskError of an oracle that sent no reference: its own report, or how it ended."""
    errors = [m for m in result.messages if m.get("kind") == TaskFailed.kind]
    if errors:
        raise TaskError(TaskFailed.from_json(errors[0]).message)
    why = ("ran past the time limit" if result.timed_out else
           f"died ({result.signal_name or f'exit code {result.exit_code}'})")
    raise TaskError(f"the reference oracle {why}:\n{result.log_tail[-2000:]}")
