"""The judge: runs the oracle and the worker in their own processes and decides.

    evaluate(task, candidate)   -> Verdict
    compare(task, a, b)         -> Comparison of two verdicts timed together

The judge never imports a candidate. It draws fresh seeds per evaluation,
holds the reference outputs only in its own memory, and turns every way a
child can end (a crash, a hang, a flood of output) into a verdict.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

import torch

from kernelevo.cache_dir import default_cache_dir, keep_bytecode
from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig
from kernelevo.errors import TaskError
from kernelevo.evaluate.analysis import decide
from kernelevo.evaluate.cuda.check import compile_check
from kernelevo.evaluate.cuda.prebuild import prebuild_source
from kernelevo.evaluate.parent.baseline_store import BaselineStore, store_key
from kernelevo.evaluate.parent.gate import gate_for
from kernelevo.evaluate.parent.other_sizes import OtherSizes, Recheck
from kernelevo.evaluate.parent.session import Session
from kernelevo.evaluate.sandbox.environment import cache_environment
from kernelevo.evaluate.sandbox.jobs import set_triton_mode, stopping
from kernelevo.evaluate.shared.cores import (TIMING_CORES_ENV, keep_off_timing_cores,
                                             process_claimed, timing_cores)
from kernelevo.evaluate.static import checks as static
from kernelevo.evaluate.verdict import Verdict, verdict_for
from kernelevo.logs import get_logger
from kernelevo.task import Task, shrink_sizes

Progress = Callable[[str], None]
log = get_logger(__name__)


def resolve_device(config: EvalConfig) -> str:
    if config.device != "auto":
        if config.device == "cuda" and not torch.cuda.is_available():
            raise TaskError("--device cuda was asked for but no CUDA GPU is visible")
        return config.device
    return "cuda" if torch.cuda.is_available() else "cpu"


_warmed: set[str] = set()
_warmed_lock = threading.Lock()


def _warm_comparisons_ahead(device: str, gpu_index: int | None) -> None:
    """This process's comparisons warmed on `device` in a thread, once per process.

    A judge made by `eval` waits seconds for its forkserver's imports; its own
    CUDA context and comparison kernels are made meanwhile, not on the
    reference's path. Tiny kernels, under a shared hold on the GPU's gate.
    """
    with _warmed_lock:
        if device in _warmed:
            return
        _warmed.add(device)

    def warm() -> None:
        try:
            with gate_for("cuda", gpu_index).shared():
                decide.warm_comparisons(device)
        except Exception:  # noqa: BLE001 - only a head start: the first comparison pays instead
            log.debug("warming the comparisons on %s failed", device, exc_info=True)

    # Not a daemon: one still in CUDA's calls as the interpreter ends aborts the
    # process ("terminate called without an active exception", a static
    # verdict's `eval` on the H200); the exit waits for it instead (< 1 s).
    threading.Thread(target=warm, name="kernelevo-warm-comparisons", daemon=False).start()


def child_environment(device: str, gpu_index: int | None) -> dict[str, str]:
    """What the judge's children add to their environment: their GPU, the build's target,
    the cores kept for timing."""
    environment = {"CUDA_VISIBLE_DEVICES": str(gpu_index)} if gpu_index is not None else {}
    if device == "cuda":
        # The cores timings run on, one per GPU of the machine: the children
        # move off them, so a timing has its core alone (shared/cores.py).
        kept = timing_cores(torch.cuda.device_count())
        if kept:
            environment[TIMING_CORES_ENV] = ",".join(map(str, kept))
            if process_claimed():  # a command's process: its own threads leave them too
                keep_off_timing_cores(environment, every_thread=True)
        # One architecture list for every build, so a build made ahead without
        # a GPU is the very build the worker looks for.
        major, minor = torch.cuda.get_device_capability(gpu_index or 0)
        environment["TORCH_CUDA_ARCH_LIST"] = os.environ.get("TORCH_CUDA_ARCH_LIST",
                                                             f"{major}.{minor}")
    return environment


class Judge:
    """Evaluates candidates of one task under one configuration."""

    # When a first evaluation starts the standby: once its worker is "warm"
    # (its baseline compiled, so the next one's compile finds the cache), or
    # once its candidates are "checked" (bench/throughput.py compares them:
    # one lane judged 1,732 candidates an hour against 1,485, H200).
    standby_after = "warm"

    def __init__(self, task: Task, config: EvalConfig | None = None,
                 progress: Progress | None = None, cache_dir: Path | None = None,
                 gpu_index: int | None = None, standby: bool = False,
                 baseline_store: BaselineStore | None = None) -> None:
        self.config = config or EvalConfig()
        # With standby on, the next evaluation's oracle and worker start as soon
        # as one is warm (or begins, once candidates come one after another),
        # so the next candidate finds them warm (a service, a search).
        self.standby = standby
        self._standby: Session | None = None
        # Its twin for the re-check at other sizes beside the next evaluation
        # (a GPU machine): its oracle has the reference at those sizes ready.
        self._recheck_standby: Session | None = None
        self._standby_lock = threading.Lock()
        self.device = resolve_device(self.config)
        # Children are confined to one GPU; the judge compares on that same GPU.
        self.gpu_index = gpu_index if self.device == "cuda" else None
        self.compare_device = f"cuda:{gpu_index or 0}" if self.device == "cuda" else "cpu"
        self.child_environment = child_environment(self.device, self.gpu_index)
        self.progress = progress or (lambda phase: None)
        self.cache_dir = cache_dir or default_cache_dir()
        # Whether a re-check at other sizes starts beside its evaluation (on a
        # GPU machine) or after it (on the CPU, two processes at once would
        # halve each one's cores).
        self.vary_beside = self.device == "cuda"
        self.notes: list[str] = []
        self._shrunk = ""  # the sizes a CPU check uses, in words
        if self.device == "cpu" and self.config.shrink_on_cpu:
            shrunk = shrink_sizes(task.constants)
            if shrunk:
                self._shrunk = ", ".join(f"{k}={v}" for k, v in shrunk.items())
                self.notes.append(f"no GPU: checked under the Triton interpreter with sizes "
                                  f"{self._shrunk}")
            task = task.with_constants(shrunk)
        self.task = task
        # The baselines' times for this task, once a worker has timed them
        # (baseline_store.py); a suite passes its store on disk.
        self.baseline_store: BaselineStore | None = None
        self.baseline_key = ""
        if self.device == "cuda" and self.config.timing.stored_baselines:
            self.baseline_store = baseline_store or BaselineStore()
            self.baseline_key = store_key(task.source, self.config.precision,
                                          self.config.timing)
        self.other_sizes = OtherSizes(self)
        set_triton_mode(self.device == "cpu")
        for key, value in cache_environment(self.cache_dir).items():
            os.environ.setdefault(key, value)
        keep_bytecode(self.cache_dir)  # for the forkserver, should it start after this
        if self.device == "cuda":
            _warm_comparisons_ahead(self.compare_device, self.gpu_index)

    def evaluate(self, candidate: Candidate) -> Verdict:
        """The verdict of one candidate, timed when it passes."""
        return self.evaluate_many([candidate])[0]

    def evaluate_many(self, candidates: list[Candidate], timed: bool = True) -> list[Verdict]:
        """Verdicts for several candidates, timed in one process (interleaved) when they pass."""
        started = time.perf_counter()
        early = [self._static_verdict(c) for c in candidates]
        pending = [i for i, v in enumerate(early) if v is None]
        verdicts: list[Verdict | None] = list(early)
        for i in pending:
            if candidates[i].backend == "cuda" and self.device == "cpu":
                self.progress("compile-checking CUDA source (no GPU)")
                verdicts[i] = compile_check(candidates[i].source, self.config)
            elif candidates[i].backend == "cuda":
                self.progress("building CUDA extension")
                self.prebuild(candidates[i])
        pending = [i for i in pending if verdicts[i] is None]
        # The re-check at other sizes runs beside the evaluation (on a GPU
        # machine, where cores are many): its oracle and worker check the
        # candidates while this one checks them, and its verdicts are there
        # when this one has timed. Not needed (nothing passed), it is killed.
        varied: list[Recheck] | None = (
            [] if self.vary_beside and self.config.vary_shapes else None)
        try:
            if pending:
                judged = self.judge_in_session([candidates[i] for i in pending], self.task,
                                               timed and self.config.time_candidates,
                                               varied=varied)
                for i, verdict in zip(pending, judged):
                    verdicts[i] = verdict
            judged = [v for v in verdicts if v is not None]
            assert len(judged) == len(candidates)  # a static verdict or a judged one, each
            if self.config.vary_shapes:
                beside = None
                if varied:  # its verdicts, by the index of the candidate they judge
                    beside = (varied[0], {i: n for n, i in enumerate(pending)})
                judged = self.other_sizes.apply(candidates, judged, beside)
        finally:  # an error or an interrupt: a re-check started beside goes too
            for recheck in varied or ():
                recheck.discard()
        total_s = time.perf_counter() - started
        return [_with_total(v, total_s, self._notes(c, i in pending))
                for i, (c, v) in enumerate(zip(candidates, judged))]

    def _notes(self, candidate: Candidate, in_session: bool) -> list[str]:
        """The judge's notes for one verdict: how a CPU check differed from a GPU's.

        A CUDA candidate on the CPU runs under no Triton interpreter: a
        compile-only check (or a static check) says what it did in its own message.
        """
        if self.device != "cpu" or candidate.backend != "cuda":
            return self.notes
        if in_session and self._shrunk:
            return [f"no GPU: checked on the CPU with sizes {self._shrunk}"]
        return []

    def prebuild(self, candidate: Candidate) -> float | None:
        """Compile a CUDA candidate ahead, on the CPU; seconds spent, or None if not applicable."""
        if self.device != "cuda" or candidate.backend != "cuda":
            return None
        return prebuild_source(candidate.source, self.config, self.child_environment,
                               self.cache_dir)

    def _static_verdict(self, candidate: Candidate) -> Verdict | None:
        if not self.config.static_checks:
            return None
        findings = static.check_source(candidate.source, candidate.backend, self.config.policy)
        if not findings:
            return None
        first = findings[0]
        where = f"line {first.line}: " if first.line else ""
        others = [f"{f.reason} (line {f.line}): {f.detail}" for f in findings[1:6]]
        return verdict_for(first.reason, where + first.detail, notes=tuple(others),
                           isolation="static check, not run")

    def judge_in_session(self, candidates: list[Candidate], task: Task, time_them: bool,
                         session: Session | None = None,
                         varied: list[Recheck] | None = None) -> list[Verdict]:
        """Verdicts of `candidates` on `task` (the judge's own, or at other sizes) in a
        session (`_run`), with the judge's own GPU memory running out turned into verdicts."""
        try:
            return self._run(candidates, task, time_them, session, varied)
        except torch.cuda.OutOfMemoryError as exc:
            message = (f"the judge's process ran out of GPU memory holding the reference and "
                       f"the candidate's outputs: {str(exc).splitlines()[0][:300]}")
            return [verdict_for("out_of_memory", message) for _ in candidates]
        finally:
            self.release_memory()

    def release_memory(self) -> None:
        """Give the GPU memory this process cached back to the device, for the workers."""
        if self.device == "cuda":
            torch.cuda.empty_cache()

    def _run(self, candidates: list[Candidate], task: Task, time_them: bool,
             session: Session | None = None,
             varied: list[Recheck] | None = None) -> list[Verdict]:
        """Judge in a session: `session`, the standby one when it fits, else one started now.

        `varied`, a list: the re-check of these candidates at other sizes
        starts beside this session, and is put in the list.
        """
        if task is not self.task:
            # Another size of the task (shape variation): a session of its own,
            # leaving the standby warm for the next candidate of the task.
            if session is None or not session.alive():
                if session is not None:
                    session.discard()
                session = Session(self, task, time_them, None)
            try:
                return session.run(candidates)
            finally:
                session.close()
        standby = self._take_standby(task, time_them)
        if standby is not None:
            # Candidates come one after another (this one found a standby): the
            # next evaluation's oracle and worker start now, beside this one.
            # They make their contexts while it checks and times, and run their
            # warm-up's kernels once it has timed (Session.past_timing).
            self._start_standby(beside=standby)
            session = standby
        else:
            # A first evaluation starts the next once it is warm: started
            # beside it, their baseline compiles would run twice at once. The
            # next one's warm-up may then hold the GPU a while when this one
            # is ready to time its candidate, unless it waits for that timing
            # (Session.past_timing).
            ahead = ((self.standby_after, lambda running: self._start_standby(beside=running))
                     if task is self.task else None)
            session = Session(self, task, time_them, ahead)
        if varied is not None and (recheck := self.other_sizes.start_beside(
                candidates, self._take_recheck_standby())):
            varied.append(recheck)
        try:
            return session.run(candidates)
        finally:
            session.close()
            self._start_standby()

    def _start_standby(self, beside: Session | None = None) -> None:
        """Start the next evaluation's session; its warm-up's kernels wait for `beside`'s timing."""
        with self._standby_lock:  # also called from a session's thread (its `ahead`)
            if self.standby and self._standby is None and not stopping():
                self._standby = Session(self, self.task, self.config.time_candidates,
                                        yield_to=beside)
            if self.standby:
                self._start_recheck_standby(beside)

    def warm_up(self) -> None:
        """Start the next evaluation's session now, before any candidate is known.

        A suite's lane calls it for its next task while it judges this one, so
        that task's first candidate finds its processes warm and its baselines
        compiled, as a standby leaves them for the candidates after it.
        """
        with self._standby_lock:
            if self._standby is None and not stopping():
                self._standby = Session(self, self.task, self.config.time_candidates)
            self._start_recheck_standby(None)

    def _start_recheck_standby(self, beside: Session | None) -> None:
        """Start the next re-check's session at other sizes, if the next evaluation has one.

        Called with the standby lock held. Without it, each re-check beside an
        evaluation would start its oracle and worker cold: their warm-up (CUDA
        contexts, the reference at other sizes) outlasted a warm candidate's
        own evaluation (bench/RESULTS.md, session 14).
        """
        if (self._recheck_standby is not None or stopping() or not self.vary_beside
                or not self.config.vary_shapes):
            return
        varied = self.other_sizes.varied()
        if varied is not None:
            self._recheck_standby = Session(self, varied[0], False, yield_to=beside)

    def _take_recheck_standby(self) -> "Session | None":
        """The re-check's standby session if it is still waiting (else None, closed)."""
        with self._standby_lock:
            session, self._recheck_standby = self._recheck_standby, None
        if session is None or session.alive():
            return session
        session.close()
        return None

    def _take_standby(self, task: Task, time_them: bool) -> "Session | None":
        with self._standby_lock:
            session, self._standby = self._standby, None
        if session is None:
            return None
        if session.task is task and (session.time_them or not time_them) and session.alive():
            return session
        session.close()
        return None

    def close(self) -> None:
        """Stop the standby session, if any (its processes end)."""
        with self._standby_lock:
            sessions = [self._standby, self._recheck_standby]
            self._standby = self._recheck_standby = None
        for session in sessions:
            if session is not None:
                session.close()

def _with_total(verdict: Verdict, total_s: float, notes: list[str]) -> Verdict:
    from dataclasses import replace

    phases = dict(verdict.phases_s)
    phases["total"] = round(total_s, 3)
    return replace(verdict, phases_s=phases, notes=tuple(notes) + tuple(verdict.notes))
