"""A session's oracle: the reference computed in its own process, its outputs kept by the judge.

`OracleRun` runs the oracle's job for a session (session.py): it asks for
the GPU's shared hold before the reference's kernels (a standby's waiting
first for the evaluation beside it, `yielding`), imports the reference's
outputs into the judge's process as they come, and checks which trivial
answers would pass while the worker still warms up.
"""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol

import torch

from kernelevo.config import EvalConfig, tolerances
from kernelevo.errors import TaskError
from kernelevo.evaluate.analysis.decide_backward import reference_gradients
from kernelevo.evaluate.analysis.reference import ReferenceResult
from kernelevo.evaluate.child.oracle import run_oracle
from kernelevo.evaluate.parent.gate import Hold
from kernelevo.evaluate.parent.host import JudgeHost
from kernelevo.evaluate.sandbox.jobs import Deadline, run_job
from kernelevo.evaluate.sandbox.pipe import JobResult
from kernelevo.evaluate.shared.gradients import backward_on
from kernelevo.evaluate.shared.messages import (ORACLE_KINDS, Gpu, Message, OracleDone, OracleJob,
                                                Progress, Reference, TaskFailed, decode)
from kernelevo.evaluate.shared.replies import Granted
from kernelevo.evaluate.shared.transfer import import_bundle
from kernelevo.task import Task


class Yielding(Protocol):
    """A standby's wait, before its first kernels, for the session it stands beside."""

    def wait(self, deadline: Deadline) -> float | None:
        """Seconds waited, or None with nothing to wait for."""
        ...


def wait_for(take: Callable[[], None], deadline: Deadline) -> float:
    """Take a hold on the gate; the wait does not count against the job's limit."""
    waited = time.monotonic()
    take()
    waited = time.monotonic() - waited
    deadline.at += waited
    return waited


def _check_trivial_answers(reference: ReferenceResult, device: str) -> ReferenceResult:
    """The reference with the trivial answers that would pass, found while the worker warms up.

    A passing verdict needs them; found here they are off the candidate's
    path, and it loads the comparison's kernels into this process ahead
    (0.5-0.8 s of a cold `kernelevo eval` otherwise). Short of GPU memory, the
    reference comes back unchecked and the judge finds them later, on the CPU
    if need be (worker_state.py).
    """
    try:
        return reference.with_trivial_answers(device)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return reference


def _reference_copy(bundle: Any, judge: JudgeHost) -> dict[str, list[Any]]:
    """The reference's outputs, on the comparison's device or, short of its memory, the CPU.

    Other lanes may hold the GPU's memory at that moment; the comparisons move
    each tensor to their device as they go (analysis/decide.py).
    """
    try:
        return import_bundle(bundle, judge.compare_device, judge.gpu_index)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return import_bundle(bundle, "cpu", judge.gpu_index)


class OracleRun:
    """Computes the reference in its own process; the judge keeps the outputs.

    `ready` is set once the reference is here (or cannot come), as the
    oracle's last message arrives: the worker goes on while the oracle's
    process exits and the judge checks which trivial answers pass, in a
    thread of its own started then. `checked` is set once that check is done
    (a decision waits for it, not for the process's exit); `done` once the
    process has ended too and the oracle's hold on the GPU is given up.
    """

    def __init__(self, judge: JudgeHost, task: Task, scratch: Path, hold: Hold,
                 yielding: Yielding) -> None:
        self.judge, self.task, self.scratch, self.hold = judge, task, scratch, hold
        self._yield = yielding
        self.deadline = Deadline()
        self.ready = threading.Event()
        self.checked = threading.Event()
        self.done = threading.Event()
        self._checker: threading.Thread | None = None
        self._check_error: Exception | None = None
        # Set once the oracle's last message came; again with its trivial answers checked.
        self.reference: ReferenceResult | None = None
        self.error: Exception | None = None
        self.phases: dict[str, float] = {}  # judge-side steps after the reference came
        self._bundle: dict[str, list[Any]] | None = None
        self._job: OracleJob | None = None
        self._done_at: float | None = None
        self._imported = False  # the oracle asked for the GPU: it has imported the task

    def run(self) -> None:
        try:
            try:  # the child asks for a shared hold before it runs kernels
                self._compute()
                self.ready.set()
                assert self.reference is not None
            finally:
                if self._checker is not None:  # the trivial answers' check, begun at the
                    self._checker.join()  # last message: its kernels under this hold, and
                self.hold.release()  # done before a failure here drops the reference
            if self._check_error is not None:
                raise self._check_error
        except Exception as exc:  # handed to the judge's thread, raised there
            kept = (TaskError, torch.cuda.OutOfMemoryError)  # the judge makes a verdict of OOM
            self.error = exc if isinstance(exc, kept) else TaskError(
                f"the reference oracle failed: {type(exc).__name__}: {exc}")
            self.reference = None
        finally:
            self.ready.set()
            self.checked.set()
            self.done.set()

    def _check_trivial(self) -> None:
        """Which trivial answers pass, checked as soon as the reference is here."""
        started = time.monotonic()
        try:
            assert self.reference is not None
            self.reference = _check_trivial_answers(self.reference, self.judge.compare_device)
            self.phases["trivial_check"] = time.monotonic() - started
        except Exception as exc:  # noqa: BLE001 - raised by run(), as it was raised there
            self._check_error = exc
        finally:
            self.checked.set()

    def _compute(self) -> None:
        config, count = self.judge.config, self.judge.config.input_sets
        # One set is a stress set (scaled by s in [32, 128], structure kept) so
        # shortcuts that only hold for the task's input distribution fail:
        # randn inputs then reach beyond 100, where exp() without a max
        # subtraction overflows.
        variant_scale = 2 ** (5 + secrets.randbelow(2000) / 1000)
        self._job = OracleJob(
            task_source=self.task.source, device=self.judge.device, dtype=config.dtype_name,
            scratch=str(self.scratch), task_folder=self.task.folder, task_path=self.task.path,
            seeds=tuple(secrets.randbits(62) for _ in range(count)),
            variants=(None,) * (count - 1) + (variant_scale,), atol=config.atol, rtol=config.rtol,
            backward=backward_on(self.task, config))
        # Until it has imported the task (its first ask), the oracle has the shorter limit.
        result = run_job(run_oracle, self._job.to_json(), self.scratch,
                         min(config.import_timeout_s, config.timeout_s),
                         config.output_limit_bytes, on_message=self._on_message,
                         environment=self.judge.child_environment,
                         isolate_network=config.isolate_network, deadline=self.deadline)
        if self._done_at is not None:  # from its last message until its process had ended
            self.phases["oracle_exit"] = time.monotonic() - self._done_at
        if result.stood_s:  # while other jobs' calls were timed (sandbox/quiet.py)
            self.phases["oracle_stood_still"] = result.stood_s
        if self.reference is None:
            _raise_oracle_failure(result, config, self._imported)

    def _on_message(self, raw: dict[str, Any]) -> dict[str, Any] | None:
        reply = self._answer(decode(raw, ORACLE_KINDS))
        return None if reply is None else reply.to_json()

    def _answer(self, message: Message) -> Message | None:
        if isinstance(message, Gpu):
            if not self._imported:  # the task is imported: the whole limit from the start
                self._imported = True
                config = self.judge.config
                self.deadline.at += config.timeout_s - min(config.import_timeout_s,
                                                           config.timeout_s)
            if not message.brief:
                # A standby's oracle, before its first kernels, waits for the evaluation
                # beside it to time. Not at a checkpoint of its checks (brief): it holds
                # the GPU there, and that timing would wait for it in turn.
                self._yield.wait(self.deadline)
            wait_for(self.hold.shared, self.deadline)
            return Granted()
        if isinstance(message, Progress):
            self.judge.progress(message.phase)
        elif isinstance(message, Reference):
            self._bundle = _reference_copy(message.bundle, self.judge)
            return Granted()
        elif isinstance(message, OracleDone) and self._bundle is not None:
            # The last message: the worker may go on while this process exits.
            self._done_at = time.monotonic()
            assert self._job is not None
            self.reference = self._reference_from(message, self._job)
            self.ready.set()
            if self._checker is None:  # once, whatever the child sends
                self._checker = threading.Thread(target=self._check_trivial, daemon=True,
                                                 name="kernelevo-trivial-answers")
                self._checker.start()
        return None

    def _reference_from(self, final: OracleDone, job: OracleJob) -> ReferenceResult:
        assert self._bundle is not None
        kept, config = final.kept_sets, self.judge.config
        return ReferenceResult(
            outputs=tuple(self._bundle[f"set_{i}"] for i in range(len(kept))),
            seeds=tuple(job.seeds[i] for i in kept),
            variants=tuple(final.variants_used),
            stress={int(k): v for k, v in final.stress.items()},
            passthrough=tuple(final.passthrough),
            constants=tuple(final.constant_tensors),
            peak_bytes=int(final.peak_bytes),
            structure=final.structure,
            ops=frozenset(final.ops),
            flops=int(final.flops), bytes_moved=int(final.bytes),
            tolerances=tuple(tolerances(name, final.atol, final.rtol, config)
                             for name in final.output_dtypes),
            backward=(reference_gradients(final, self._bundle, config) if job.backward
                      else None))


def _raise_oracle_failure(result: JobResult, config: EvalConfig, imported: bool) -> None:
    """The TaskError of an oracle that sent no reference: its own report, or how it ended."""
    errors = [m for m in result.messages if m.get("kind") == TaskFailed.kind]
    if errors:
        raise TaskError(TaskFailed.from_json(errors[0]).message)
    tail = result.log_tail.strip()[-2000:]
    raise TaskError(_how_it_ended(result, config, imported)
                    + (f"; its last output:\n{tail}" if tail else ""))


def _how_it_ended(result: JobResult, config: EvalConfig, imported: bool) -> str:
    """Why an oracle that sent no report of its own ended, and what to do about it."""
    if result.timed_out and not imported and config.import_timeout_s < config.timeout_s:
        return (f"importing the task took more than {config.import_timeout_s:g} s ([eval] "
                "import_timeout_s): a task must import quickly; move slow work (loops, "
                "downloads, large allocations) out of its top level, or raise import_timeout_s")
    if result.timed_out:
        return (f"the task's reference ran past the time limit of {config.timeout_s:g} s "
                "(--timeout, [eval] timeout_s): give a larger --timeout, or the task smaller "
                "sizes")
    if result.output_exceeded:
        return (f"the task printed more than {config.output_limit_bytes:,} bytes ([eval] "
                "output_limit_bytes): print less from the task's code")
    if result.signal_name == "SIGKILL":
        return ("the reference oracle was killed (SIGKILL), most likely because the machine's "
                "memory ran out: give the task smaller sizes (--max-input-elements)")
    how = (f"was killed by {result.signal_name}" if result.signal_name
           else f"exited with code {result.exit_code}")
    return (f"the reference oracle {how} with no error of its own: the task's code ended its "
            "process (os._exit, or a crash in a native library); run the task's Model on its "
            "get_inputs() in Python to see why")
