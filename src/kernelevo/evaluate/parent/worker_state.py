"""The judge's side of one worker: its reports collected, its questions answered.

A `Session` hands each decoded worker message here once candidates were
given: progress, the warm-up's steps, each candidate's failure or checked
outputs (decided at once, `judge_candidate`), which to time, and the timing
report; outcome.py then makes the verdicts.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any, Callable, ContextManager

import torch

from kernelevo.candidate import Candidate
from kernelevo.evaluate.analysis import decide, tolerance
from kernelevo.evaluate.analysis.decide_backward import decide_backward
from kernelevo.evaluate.analysis.reference import ReferenceResult
from kernelevo.evaluate.parent.host import JudgeHost
from kernelevo.evaluate.parent.oracle_run import OracleRun
from kernelevo.evaluate.shared import preload_modules
from kernelevo.evaluate.shared.messages import (Checked, CheckedCandidate, Failed, Message,
                                                Progress, Ready, Timing)
from kernelevo.evaluate.shared.replies import Abort, Granted, ReadyReply, TimeThese
from kernelevo.evaluate.shared.transfer import TransferError, import_bundle

# A checked candidate's decision: ("passed" or "failed", its details).
Decision = tuple[str, dict[str, Any]]


class WorkerState:
    """Collects the worker's reports and answers its questions while it runs."""

    def __init__(self, judge: JudgeHost, candidates: list[Candidate], oracle: OracleRun,
                 time_them: bool) -> None:
        self.judge, self.candidates, self.oracle = judge, candidates, oracle
        self._reference: ReferenceResult | None = None
        self.time_them = time_them
        self.decisions: dict[int, Decision] = {}
        self.checked_peak_bytes = 0  # the worker's GPU peak once its checks were done
        self.reports: dict[int, CheckedCandidate] = {}
        self.failures: dict[int, Failed] = {}
        self.timing: Timing | None = None
        self.started = time.perf_counter()
        # Judge-side phases: from the worker's start to its first question
        # (process start, task import, baselines warm-up), and how long it
        # then waited for the oracle's reference.
        self.phases: dict[str, float] = {}
        # Whether the worker finished its warm-up (the task's Model, run for the
        # baselines): a worker that died before it never loaded a candidate.
        self.warmed_up = False
        # Entered while a decision runs on the CPU, the worker's outputs copied off
        # the GPU: the session gives its GPU hold up meanwhile (session.py).
        self.off_gpu: Callable[[], ContextManager[None]] = nullcontext

    def on_message(self, message: Message) -> Message | None:
        if isinstance(message, Progress):
            self.judge.progress(message.phase)
        elif isinstance(message, Ready):
            self.warmed_up = True
            # Where the worker's own warm-up went (done ahead, for a standby session).
            for step, seconds in message.warmup.items():
                self.phases[f"warmup_{step}"] = seconds
            if message.imported:  # before any candidate ran
                preload_modules.remember(self.judge.cache_dir, list(message.imported))
            return self._ready()
        elif isinstance(message, Failed):
            self.failures[message.candidate] = message
            self.decisions[message.candidate] = (
                "failed", {"reason": message.reason, "message": message.message})
            return Granted()
        elif isinstance(message, CheckedCandidate):
            self._judge(message)
            return Granted()
        elif isinstance(message, Checked):
            self.checked_peak_bytes = message.peak_bytes
            passing = [i for i, d in self.decisions.items() if d[0] == "passed"]
            return TimeThese(tuple(passing) if self.time_them else ())
        elif isinstance(message, Timing):
            self.timing = message
        return None

    def _judge(self, report: CheckedCandidate) -> None:
        self.reports[report.candidate] = report
        self.judge.progress("judging outputs")
        started = time.perf_counter()
        self.decisions[report.candidate] = judge_candidate(self, report.candidate, report)
        self.phases["judging"] = self.phases.get("judging", 0.0) + (
            time.perf_counter() - started)
        self.judge.progress("judged")

    @property
    def reference(self) -> ReferenceResult:
        """The oracle's reference, taken as the worker asked for it: candidates come after."""
        if self._reference is None:
            raise RuntimeError("the worker's state holds no reference yet")
        return self._reference

    def check_trivial(self, device: str) -> None:
        """Keep the reference with its trivial answers: the oracle's check, else one made here.

        The oracle's thread checks them beside the worker (oracle_run.py) and
        keeps the checked reference; short of GPU memory there, it kept it
        unchecked, and the check is made here, on `device`.
        """
        self.oracle.checked.wait()
        reference = self.oracle.reference or self.reference  # None: the check itself failed
        if reference.trivial is None:
            reference = reference.with_trivial_answers(device)
        self._reference = reference

    def _ready(self) -> ReadyReply | Abort:
        """Release the worker once the reference exists (or tell it to stop)."""
        asked = time.perf_counter()
        self.phases["worker_start"] = asked - self.started
        self.oracle.ready.wait()
        self.phases["reference_wait"] = time.perf_counter() - asked
        reference = self._reference = self.oracle.reference
        if reference is None:
            return Abort()
        self.judge.progress("loading candidate")
        return ReadyReply(seeds=reference.seeds, variants=reference.variants,
                          tolerances=tuple(tuple(t) for t in reference.tolerances))


def _outputs_from(report: CheckedCandidate, count: int, judge: JudgeHost,
                  device: str) -> dict[str, Any]:
    """The worker's outputs as {'sets': [...], 'repeat': ..., 'knockout': ...}.

    On the worker's GPU they stay in the worker's memory, mapped, not copied:
    the worker waits for the decision, and nothing of them is kept after it.
    A copy of every set's outputs beside the worker's and the other lanes'
    ran out of memory, and the comparison then went to the CPU (minutes for
    a 3D convolution's outputs on a slow host, the GPU's gate held all along).
    """
    bundle = import_bundle(report.bundle, device, judge.gpu_index, copy=device == "cpu")
    structures = report.structures

    def entry(name: str) -> dict[str, Any] | None:
        if name not in bundle:
            return None
        return {"values": bundle[name], "structure": str(structures.get(name, "?"))}

    sets = [entry(f"set_{i}") for i in range(count)]
    if any(s is None for s in sets) or entry("repeat") is None:
        raise TransferError("the worker's report lacks outputs")
    return {"sets": sets, "repeat": entry("repeat"), "knockout": entry("knockout"),
            "gradients": {k: v for k, v in bundle.items() if k.startswith("grad_")}}


def judge_candidate(state: WorkerState, index: int, report: CheckedCandidate) -> Decision:
    """Decide one candidate from its checked report: ('passed'|'failed', details).

    The worker holds its GPU memory while it waits for this answer. When the
    GPU has no room left for the comparison, it is made again on the GPU an
    eighth of a chunk at a time, and only then on the CPU: a suite's lanes
    fill the GPU's memory, and a comparison on the CPU took 32-63 s a row on a
    slow host, the worker's hold on the GPU kept and every lane's timing
    waiting behind it (bench/RESULTS.md). On the CPU the hold goes once the
    worker's outputs are copied (`state.off_gpu`). Its seconds go to the phases:
    `decide`, and of them `decide_outputs` (the worker's outputs made readable
    here), `decide_small_chunks` and `decide_cpu`.
    """
    started = time.perf_counter()
    device = state.judge.compare_device
    try:
        try:
            return _judge_on(state, index, report, device)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
        small = time.perf_counter()
        try:
            with tolerance.smaller_chunks():
                return _judge_on(state, index, report, device)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
        finally:
            _add(state.phases, "decide_small_chunks", time.perf_counter() - small)
        on_cpu = time.perf_counter()
        try:
            return _judge_on(state, index, report, "cpu", state.off_gpu)
        finally:
            _add(state.phases, "decide_cpu", time.perf_counter() - on_cpu)
    finally:
        _add(state.phases, "decide", time.perf_counter() - started)


def _add(phases: dict[str, float], name: str, seconds: float) -> None:
    phases[name] = round(phases.get(name, 0.0) + seconds, 4)


def _judge_on(state: WorkerState, index: int, report: CheckedCandidate, device: str,
              off_gpu: Callable[[], ContextManager[None]] = nullcontext) -> Decision:
    """The decision on `device`; `off_gpu` is entered once the worker's outputs are here."""
    started = time.perf_counter()
    try:
        outputs = _outputs_from(report, len(state.reference.outputs), state.judge, device)
    except TransferError as exc:  # a candidate that corrupts its own report fails, not the judge
        return "failed", {"reason": "harness_tampered", "message": f"unreadable outputs: {exc}"}
    finally:  # of `decide`: the worker's outputs opened (CUDA IPC) or read here
        _add(state.phases, "decide_outputs", time.perf_counter() - started)
    with off_gpu():
        return _decide(state, index, report, outputs, device)


def _decide(state: WorkerState, index: int, report: CheckedCandidate, outputs: dict[str, Any],
            device: str) -> Decision:
    ref = state.reference
    guard = decide.guard_reason(report)
    if guard:
        return "failed", {"reason": guard[0], "message": guard[1]}
    started = time.perf_counter()
    correctness = decide.decide_correctness(outputs, ref.outputs, ref.structure,
                                            ref.tolerances, device, ref.stress)
    _add(state.phases, "decide_correctness", time.perf_counter() - started)
    if correctness.reason:
        return "failed", {"reason": correctness.reason, "message": correctness.message,
                          "metrics": correctness.metrics}
    if report.rotation_problem:
        return "failed", {"reason": "inconsistent_under_timing",
                          "message": report.rotation_problem[:1000]}
    candidate = state.candidates[index]
    started = time.perf_counter()
    honesty = decide.decide_honesty(report, outputs, ref.outputs[0], ref.structure,
                                    ref.tolerances, candidate.backend,
                                    state.judge.config.policy, ref.ops, device)
    _add(state.phases, "decide_honesty", time.perf_counter() - started)
    if honesty.reason:
        return "failed", {"reason": honesty.reason, "message": honesty.message,
                          "metrics": correctness.metrics}
    if ref.backward is not None:  # the backward is judged too
        backward = decide_backward(report, outputs["gradients"], ref, ref.backward,
                                   candidate.backend, state.judge.config.policy, device)
        if backward.reason:
            return "failed", {"reason": backward.reason, "message": backward.message,
                              "metrics": backward.metrics or correctness.metrics}
        honesty.notes += backward.notes
    started = time.perf_counter()
    state.check_trivial(device)  # the oracle's thread checks them beside the worker
    _add(state.phases, "decide_trivial", time.perf_counter() - started)
    return "passed", {"metrics": correctness.metrics, "notes": honesty.notes}
