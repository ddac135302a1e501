"""The candidate worker: loads one or more candidates in a sandboxed child and runs them.

It never sees reference outputs. It sends the candidate's outputs (as files)
and what its guards observed to the judge, which decides; on the judge's word
it then times the candidates against the baselines in this same process.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import torch

from kernelevo.evaluate.analysis.oom import is_out_of_memory, summary
from kernelevo.evaluate.child import guards
from kernelevo.evaluate.child.autotune_budget import AutotuneBudget
from kernelevo.evaluate.child.baselines import warm_baselines
from kernelevo.evaluate.child.checkpoint import gpu_checkpoint
from kernelevo.evaluate.child.worker_backward import BackwardRuns, warm_autograd_threads
from kernelevo.evaluate.child.store_timing import stored_or_timed
from kernelevo.evaluate.child.worker_timing import rotation_check, run_timing
from kernelevo.evaluate.cuda.build import CompileOnly, LoadInlineHook
from kernelevo.evaluate.cuda.diagnostics import with_first_error
from kernelevo.evaluate.cuda.shims_host import BACKGROUND, wait_for_background
from kernelevo.evaluate.sandbox.pipe import Channel
from kernelevo.evaluate.sandbox.redact import candidate_traceback
from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.messages import (Checked, CheckedCandidate, CompileChecked, CpuWork,
                                                Failed, Gpu, PrebuildDone, PrebuildJob, Progress,
                                                Ready, Sender, WorkerDone, WorkerJob)
from kernelevo.evaluate.shared.replies import BaselinesReply, ReadyReply, TimeThese, reply_to_ready
from kernelevo.evaluate.shared.oplog import record_ops
from kernelevo.evaluate.shared.transfer import export_bundle


class Failure(Exception):
    """A candidate failed in a way with a named reason; carries the log."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def run_worker(payload: dict[str, Any], raw_channel: Channel) -> None:
    """Child entry point: warm the baselines, wait for the reference, check, then time."""
    job, channel = WorkerJob.from_json(payload), Sender(raw_channel)
    device = job.device
    # The candidate and the baselines run as a user's process runs them: the
    # reference's strict numerics live in the oracle only.
    task_inputs.set_user_backend(conv_tf32=False)
    scratch = Path(job.scratch)
    started = time.perf_counter()
    task = task_inputs.import_source(job.task_source, "kernelevo_task", scratch,
                                     job.task_folder)
    warmup = {"task_import": time.perf_counter() - started}
    if device == "cuda":
        # A context runs no kernels, so it is made before the GPU's gate is
        # held: a timing phase elsewhere on the GPU goes on meanwhile.
        started = time.perf_counter()
        torch.cuda.init()
        torch.empty(1, device=device)
        warmup["cuda_init"] = time.perf_counter() - started
    # From here on this worker runs kernels: a shared hold. Brief ones first
    # (the baselines' model and inputs); their compile then gives the hold up.
    started = time.perf_counter()
    channel.ask(Gpu(brief=True))
    warmup["gpu_wait"] = time.perf_counter() - started
    # Baselines compile while the oracle computes the reference in its own
    # process; the candidate is loaded only once the reference is done.
    baselines, stored = None, None
    imported: list[str] = []
    if device == "cuda" and job.time:
        channel.send(Progress("warming baselines"))
        before = set(sys.modules)
        baselines = warm_baselines(task, job, _GpuPhases(channel))
        imported = sorted(set(sys.modules) - before)  # for the next forkserver to preload
        warmup.update(baselines.steps)
        channel.send(Progress("baselines warm"))
        started = time.perf_counter()
        waits: dict[str, float] = {}
        stored = stored_or_timed(task, job, baselines, channel, waits)  # no candidate loaded yet
        warmup.update(waits)
        # any timing for the store, its waits for the GPU apart
        warmup["baselines_store"] = time.perf_counter() - started - sum(waits.values())
    reply = reply_to_ready(channel.ask(Ready({k: round(v, 4) for k, v in warmup.items()},
                                             tuple(imported))))
    if not isinstance(reply, ReadyReply):
        return
    _check_all(job, reply, task, channel, baselines, scratch, stored)
    channel.send(WorkerDone())


class _GpuPhases:
    """The warm-up's GPU hold, given up for its CPU-only compile and asked for again."""

    def __init__(self, channel: Sender) -> None:
        self.channel = channel
        self.held = True

    def cpu_only(self) -> None:
        if self.held:
            self.channel.ask(CpuWork())
            self.held = False

    def kernels(self) -> None:
        if not self.held:
            self.channel.ask(Gpu())
            self.held = True


def _check_all(job: WorkerJob, given: ReadyReply, task: Any, channel: Sender,
               baselines: Any, scratch: Path, stored: BaselinesReply | None) -> None:
    """Check every candidate given, then time those the judge names."""
    device = job.device
    setup_started = time.perf_counter()
    switch = guards.KernelSwitch()
    hook = LoadInlineHook(device == "cuda", switch)
    budget = AutotuneBudget(job.timing.autotune_budget_s)
    budget.install()  # before the snapshot: the wrapped autotuner is the harness's own
    if job.backward:
        warm_autograd_threads(device)  # before the guards' first look at threads
    watch = guards.ProcessWatch(scratch / "work")  # after the baselines: their helpers are ours
    snapshot = guards.HarnessSnapshot(extra_modules=(guards, task_inputs))
    # Every candidate's knockout runs before any candidate computes set 0
    # (_SetRuns): a later candidate's knockout must not find an earlier
    # one's right answer in freed memory.
    started: dict[int, Any] = {}
    setup_s = time.perf_counter() - setup_started
    for index, candidate in enumerate(given.candidates):
        try:
            budget.charge_to(index)
            step_started, built_before = time.perf_counter(), hook.build_s
            started[index] = _reported(lambda: _start_candidate(
                index, candidate, task, job, given, channel, switch, hook, watch, snapshot),
                "loading and the first input sets")
            started[index].report["setup_s"] = setup_s  # the guards' set-up, before any loads
        except Failure as failure:
            channel.ask(Failed(index, failure.reason, failure.message,
                               failed_after_s=time.perf_counter() - step_started,
                               build_s=hook.build_s - built_before))
            _release(failure, device)
    loaded = []
    for index in range(len(given.candidates)):
        try:
            budget.charge_to(index)
            step_started = time.perf_counter()
            loaded.append(_reported(lambda: _finish_candidate(
                started[index], job, given, channel, hook, watch, snapshot, budget),
                "the last input set and the transfer of its outputs")
                if index in started else None)
        except Failure as failure:
            channel.ask(Failed(index, failure.reason, failure.message,
                               failed_after_s=time.perf_counter() - step_started))
            started.pop(index, None)  # its model and outputs: room for the next candidate
            _release(failure, device)
            loaded.append(None)
    reply = TimeThese.from_json(channel.ask(Checked(task_inputs.peak_gpu_bytes(device))))
    timed = {i for i in reply.time if 0 <= i < len(loaded) and loaded[i] is not None}
    if timed and baselines is not None:
        run_timing({i: loaded[i] for i in sorted(timed)}, baselines, task, job, given, channel,
                   snapshot, launches=lambda: switch.launches, stored=stored,
                   unhooked=switch.unhooked)


Step = TypeVar("Step")


def _reported(step: Callable[[], Step], during: str) -> Step:
    """step(), with memory running out anywhere in it a Failure the judge hears of.

    The candidate's own calls are guarded one by one; this catches the
    harness's work around them (its inputs, the copies of its outputs, their
    transfer), which a candidate's 6.4 GB outputs can leave without room.
    """
    try:
        return step()
    except Failure:
        raise
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        raise Failure("out_of_memory", f"{summary(str(exc), during)}\n{_trimmed()}") from None


def _release(failure: Failure, device: str) -> None:
    """After a candidate out of GPU memory, give what it held back, so the next one has it."""
    if failure.reason == "out_of_memory" and device == "cuda":
        torch.cuda.empty_cache()


def run_prebuild(payload: dict[str, Any], channel: Channel) -> None:
    """Child entry point with no GPU visible: build a CUDA candidate into the shared cache.

    The worker that later judges it finds the build by its hash and only loads
    it, so the GPU waits for timing rather than for nvcc. The build's answer
    goes as soon as the build is done; a precompiled header the build started
    (cuda/shims_host.py) is finished after it, the job ending only then.
    """
    job = PrebuildJob.from_json(payload)
    background = Path(job.scratch) / "pch-background"
    os.environ[BACKGROUND] = str(background)
    hook = LoadInlineHook(True, guards.KernelSwitch())
    started = time.perf_counter()
    try:
        task_inputs.import_source(job.source, "kernelevo_prebuild", Path(job.scratch))
        ok = True
    except Exception:  # the judging worker reports failures; here only the build matters
        ok = False
    Sender(channel).send(PrebuildDone(ok, hook.build_s, time.perf_counter() - started))
    wait_for_background(background, _HEADER_WAIT_S)


# How long a prebuild's job waits, after its answer, for a header it started.
_HEADER_WAIT_S = 300.0


def run_compile_check(payload: dict[str, Any], channel: Channel) -> None:
    """Child entry point with no GPU visible: import the candidate, nvcc standing in for a build."""
    job = PrebuildJob.from_json(payload)
    LoadInlineHook(False, guards.KernelSwitch())
    started = time.perf_counter()
    try:
        load_candidate_module(job.source, "kernelevo_compile_check", Path(job.scratch))
        reason, message = None, ""
    except Failure as failure:
        reason, message = failure.reason, failure.message
    Sender(channel).send(CompileChecked(reason, message, time.perf_counter() - started))


def _start_candidate(index: int, candidate: dict[str, str], task: Any, job: WorkerJob,
                     given: ReadyReply, channel: Sender, switch: Any, hook: LoadInlineHook,
                     watch: Any, snapshot: Any) -> "_SetRuns":
    """Load and construct one candidate, then its first step on the input sets."""
    device, dtype = job.device, getattr(torch, job.dtype)
    channel.send(Progress("compile", index))
    seen, patched = watch.snapshot(), set(snapshot.tampered())
    started = time.perf_counter()
    setters = len(switch.cuda_setters)
    module = load_candidate_module(candidate["source"], f"kernelevo_candidate_{index}",
                                   Path(job.scratch))
    load_s = time.perf_counter() - started
    model = _construct(module, task, device, dtype)
    runs = _SetRuns(index, model, module, task, job, given, switch,
                    checkpoint=lambda: gpu_checkpoint(channel, device))
    runs.report.update(load_s=load_s, build_s=hook.build_s,
                       cuda_switchable=len(switch.cuda_setters) > setters)
    channel.send(Progress("correctness", index))
    runs.first()
    runs.charge(watch.new_since(seen), snapshot.tampered(), patched)
    return runs


def _finish_candidate(runs: "_SetRuns", job: WorkerJob, given: ReadyReply, channel: Sender,
                      hook: LoadInlineHook, watch: Any, snapshot: Any,
                      budget: AutotuneBudget) -> Any:
    """The candidate's second step on the input sets, its report to the judge; its model."""
    runs.checkpoint()  # a timing waiting for the GPU goes first: others' candidates, not ours
    seen, patched = watch.snapshot(), set(snapshot.tampered())
    report = runs.finish()
    runs.charge(watch.new_since(seen), snapshot.tampered(), patched)
    report.update(instrumented=hook.instrumented, uninstrumented=hook.uninstrumented,
                  **budget.report(runs.index),
                  **{key: tuple(values) for key, values in runs.found.items()})
    bundle = report.pop("bundle")
    verified = [bundle[f"set_{i}"] for i in range(len(given.seeds))]
    if job.rotation and (not job.time or job.device != "cuda"):
        # Without a timing phase, repeated calls on rotated inputs stand in for
        # it, so caches and warm-up-only computation are still caught (not in
        # a re-check at other sizes: its evaluation caught them at the task's).
        report["rotation_problem"] = rotation_check(runs.model, runs.task, job, given, verified)
    # The judge compares the outputs while this process waits for its reply.
    runs.checkpoint()  # a timing waiting goes before the judge's comparisons
    channel.ask(CheckedCandidate(candidate=runs.index,
                                 bundle=export_bundle(bundle, Path(job.scratch)), **report))
    return runs.model, runs.module, verified


def load_candidate_module(source: str, name: str, folder: Path) -> Any:
    """Import a candidate's source; a Failure with its reason when it will not load."""
    try:
        module = task_inputs.import_source(source, name, folder)
    except SyntaxError as exc:
        raise Failure("syntax_error", f"line {exc.lineno}: {exc.msg}") from None
    except CompileOnly as outcome:
        raise _compile_only(outcome) from None
    except Exception as exc:
        if is_out_of_memory(exc):
            raise Failure("out_of_memory", f"{summary(str(exc), 'import')}\n{_trimmed()}") \
                from None
        if _is_build_error(exc):
            raise Failure("compile_failed", with_first_error(_trimmed(), str(exc))) from None
        raise Failure("import_failed", _trimmed()) from None
    if not isinstance(getattr(module, "ModelNew", None), type):
        raise Failure("no_modelnew", "the candidate defines no class ModelNew")
    return module


def _compile_only(outcome: CompileOnly) -> Failure:
    if outcome.ok:
        return Failure("no_gpu", "CUDA source compiled with nvcc; running it needs a GPU")
    if outcome.log == "no nvcc":
        return Failure("no_nvcc", "no GPU and no nvcc: the CUDA candidate was not checked")
    if outcome.log.startswith("missing system header"):
        return Failure("compile_check_unavailable", f"no GPU, and nvcc here lacks torch's "
                       f"dependencies ({outcome.log}): the CUDA candidate was not checked")
    return Failure("compile_failed", with_first_error(outcome.log, outcome.log))


def _is_build_error(exc: Exception) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(mark in text for mark in ("Error building extension", "CompilationError",
                                         "nvcc", "ninja"))


def _construct(module: Any, task: Any, device: str, dtype: torch.dtype) -> Any:
    if issubclass(module.ModelNew, task.Model):
        raise Failure("inherits_reference", "ModelNew is a subclass of the reference Model")
    try:
        return task_inputs.build_model(module.ModelNew, list(task.get_init_inputs()), device,
                                       dtype)
    except CompileOnly as outcome:  # load_inline called in ModelNew, on a machine with no GPU
        raise _compile_only(outcome) from None
    except Exception as exc:
        raise Failure(*_classify(exc, "init_failed")) from None


class _SetRuns:
    """One candidate's calls on the input sets, in two steps.

    first(): sets 1 and on (any autotuning is done with the kernels on), then
    set 0 with the candidate's own kernels switched off (the knockout).
    finish(): set 0, and a repeat of it under the op log. A job's candidates
    all take their first step before any takes its second, so no knockout
    runs after set 0 was computed in this process: no freed buffer can still
    hold its right answer (on the CPU freed memory is not poisoned).
    """

    def __init__(self, index: int, model: Any, module: Any, task: Any, job: WorkerJob,
                 given: ReadyReply, switch: Any,
                 checkpoint: Callable[[], None] = lambda: None) -> None:
        self.index, self.model, self.module, self.task = index, model, module, task
        self.switch = switch
        self.checkpoint = checkpoint  # between sets: a timing waiting for the GPU goes first
        self.device, self.dtype = job.device, getattr(torch, job.dtype)
        self.sets = list(zip(given.seeds, given.variants))
        self.problems: list[str] = []
        self.outputs: dict[int, dict[str, Any]] = {}
        self.first_call_s: list[float] = []  # the first call's time (a JIT compiles then)
        self.knockout: dict[str, Any] | None = None
        self.report: dict[str, Any] = {}
        self.check_s = 0.0
        self.launches = 0  # this candidate's own Triton launches (with the kernels on)
        # threads, child processes, files and harness patches that appeared
        # during its own steps
        self.found: dict[str, list] = {"threads": [], "children": [], "files": [],
                                       "tampered": []}
        # Forward and backward calls, for a task whose backward is judged.
        self.backward = (BackwardRuns(model, task, self.sets, self.device, self.dtype, switch)
                         if job.backward else None)

    def first(self) -> None:
        with self._counted():
            for number in range(1, len(self.sets)):
                self._run_set(number)
                self.checkpoint()
            self.switch.set(False)
            try:
                self.knockout = self._call(0, [], None, True)
            except Failure:
                self.knockout = None  # crashing without its kernels proves they matter
            finally:
                self.switch.set(True)
        if self.backward is not None:  # not counted with the forward's launches
            self.backward.knockout_run()

    def finish(self) -> dict[str, Any]:
        """Outputs for every input set, a repeat of the first, and the knockout's."""
        ops: set[str] = set()
        with self._counted():
            self._run_set(0)
            repeat = self._call(0, self.problems, ops)
        ordered = [self.outputs[number] for number in range(len(self.sets))]
        bundle = {f"set_{i}": entry["values"] for i, entry in enumerate(ordered)}
        bundle["repeat"] = repeat["values"]
        structures = {f"set_{i}": entry["structure"] for i, entry in enumerate(ordered)}
        structures["repeat"] = repeat["structure"]
        if self.knockout is not None:
            bundle["knockout"] = self.knockout["values"]
            structures["knockout"] = self.knockout["structure"]
        backward: dict[str, Any] = {}
        if self.backward is not None:
            gradients, backward = self.backward.finish()
            bundle.update(gradients)
        return {**self.report, **backward, "bundle": bundle, "structures": structures,
                "problems": tuple(self.problems), "ops": tuple(sorted(ops)),
                "first_call_s": self.first_call_s[0], "triton_launches": self.launches,
                "check_s": self.check_s}

    def charge(self, found: dict[str, list], tampered: list[str], before: set[str]) -> None:
        """Add what appeared during one step (patches: those not there before it)."""
        found = {**found, "tampered": [name for name in tampered if name not in before]}
        for key, values in found.items():
            self.found[key] += [v for v in values if v not in self.found[key]]

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        started, launches = time.perf_counter(), self.switch.launches
        try:
            yield
        finally:
            self.check_s += time.perf_counter() - started
            self.launches += self.switch.launches - launches

    def _run_set(self, number: int) -> None:
        started = time.perf_counter()
        self.outputs[number] = self._call(number, self.problems)
        self.first_call_s.append(time.perf_counter() - started)

    def _call(self, number: int, problems: list[str], ops: set[str] | None = None,
              quiet: bool = False) -> dict[str, Any]:
        # Room for the call's own allocations, poisoned: its inputs and the
        # largest output seen so far, twice over (each call's outputs are alike).
        largest = max((task_inputs.tensor_bytes(entry["values"])
                       for entry in self.outputs.values()), default=0)
        return _call_checked(self.model, self.task, *self.sets[number], self.device,
                             self.dtype, problems, ops, quiet, headroom_outputs=largest)


def _call_checked(model: Any, task: Any, seed: int, variant: Any, device: str,
                  dtype: torch.dtype, problems: list[str], ops: set[str] | None = None,
                  quiet: bool = False, headroom_outputs: int = 0) -> dict[str, Any]:
    """One forward call on fresh copies of an input set, with the per-call guards.

    `headroom_outputs`: the bytes of an earlier call's outputs; the allocator
    holds poisoned room for twice them and the inputs (guards.poison_allocator).
    """
    inputs = task_inputs.kept_inputs(task, seed, device, dtype, variant)
    given = task_inputs.clone_inputs(inputs)
    guards.poison_allocator(device, 2 * (task_inputs.tensor_bytes(given) + headroom_outputs))
    try:
        with torch.no_grad():
            if ops is None:
                output = model(*given)
            else:
                output, recorded, _ = record_ops(lambda: model(*given))
                ops.update(recorded)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        raise Failure(*_classify(exc, "forward_failed")) from None
    values, structure = task_inputs.flatten_outputs(output)
    if not quiet:
        for position, value in enumerate(values):
            problem = guards.output_problem(value, position)
            if problem:
                problems.append("not_a_tensor: " + problem)
        for position, (before, after) in enumerate(zip(inputs, given)):
            if isinstance(before, torch.Tensor) and not torch.equal(before, after):
                problems.append(f"mutated_inputs: input {position} changed during forward")
    return {"values": [_plain(v) for v in values], "structure": structure}


def _plain(value: Any) -> Any:
    """A detached plain tensor (what the judge will compare), or a stand-in string."""
    if isinstance(value, torch.Tensor):
        return value.detach().as_subclass(torch.Tensor).clone()
    return f"<{type(value).__name__}>"


_DURING = {"init_failed": "ModelNew's construction", "forward_failed": "forward"}


def _classify(exc: BaseException, default: str) -> tuple[str, str]:
    text = f"{type(exc).__name__}: {exc}"
    if is_out_of_memory(exc):
        return "out_of_memory", f"{summary(text, _DURING.get(default, default))}\n{_trimmed()}"
    if any(mark in text for mark in ("CUDA error", "illegal memory access", "cudaError",
                                     "an illegal instruction", "unspecified launch failure")):
        return "cuda_error", _trimmed()
    return default, _trimmed()


def _trimmed(limit_lines: int = 30) -> str:
    """The exception being handled, as the candidate's author needs it (redact.py)."""
    handled = sys.exc_info()[1]
    assert handled is not None  # called only in except blocks
    return candidate_traceback(handled, limit_lines)
