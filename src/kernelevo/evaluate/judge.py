"""The judge: runs the oracle and the worker in their own processes and decides.

    evaluate(task, candidate)   -> Verdict
    compare(task, a, b)         -> Comparison of two verdicts timed together

The judge never imports a candidate. It draws fresh seeds per evaluation,
holds the reference outputs only in its own memory, and turns every way a
child can end (a crash, a hang, a flood of output) into a verdict.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig, tolerances
from kernelevo.errors import TaskError
from kernelevo.evaluate import static
from kernelevo.evaluate.oracle import run_oracle
from kernelevo.evaluate.outcome import build_verdicts
from kernelevo.evaluate.sandbox import JobResult, run_job
from kernelevo.evaluate.transfer import import_bundle
from kernelevo.evaluate.worker import cache_environment, run_prebuild, run_worker
from kernelevo.task import Task, perturb_sizes, shrink_sizes

Progress = Callable[[str], None]


def default_cache_dir() -> Path:
    root = os.environ.get("KERNELEVO_CACHE_DIR") or Path.home() / ".cache" / "kernelevo"
    return Path(root)


def resolve_device(config: EvalConfig) -> str:
    if config.device != "auto":
        if config.device == "cuda" and not torch.cuda.is_available():
            raise TaskError("--device cuda was asked for but no CUDA GPU is visible")
        return config.device
    return "cuda" if torch.cuda.is_available() else "cpu"


class Judge:
    """Evaluates candidates of one task under one configuration."""

    def __init__(self, task: Task, config: EvalConfig | None = None,
                 progress: Progress | None = None, cache_dir: Path | None = None,
                 gpu_index: int | None = None) -> None:
        self.config = config or EvalConfig()
        self.device = resolve_device(self.config)
        # Children are confined to one GPU; the judge compares on that same GPU.
        self.gpu_index = gpu_index if self.device == "cuda" else None
        self.compare_device = f"cuda:{gpu_index or 0}" if self.device == "cuda" else "cpu"
        self.child_environment = ({"CUDA_VISIBLE_DEVICES": str(gpu_index)}
                                  if self.gpu_index is not None else {})
        if self.device == "cuda":
            # One architecture list for every build, so a build made ahead without
            # a GPU is the very build the worker looks for.
            major, minor = torch.cuda.get_device_capability(gpu_index or 0)
            self.child_environment["TORCH_CUDA_ARCH_LIST"] = os.environ.get(
                "TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
        self.progress = progress or (lambda phase: None)
        self.cache_dir = cache_dir or default_cache_dir()
        self.notes: list[str] = []
        if self.device == "cpu" and self.config.shrink_on_cpu:
            shrunk = shrink_sizes(task.constants)
            if shrunk:
                self.notes.append("no GPU: checked under the Triton interpreter with sizes "
                                  + ", ".join(f"{k}={v}" for k, v in shrunk.items()))
            task = task.with_constants(shrunk)
        self.task = task
        os.environ.setdefault("TRITON_INTERPRET", "1" if self.device == "cpu" else "0")
        for key, value in cache_environment(self.cache_dir).items():
            os.environ.setdefault(key, value)

    def evaluate(self, candidate: Candidate) -> Any:
        return self.evaluate_many([candidate])[0]

    def evaluate_many(self, candidates: list[Candidate], timed: bool = True) -> list[Any]:
        """Verdicts for several candidates, timed in one process (interleaved) when they pass."""
        started = time.perf_counter()
        early = [self._static_verdict(c) for c in candidates]
        pending = [i for i, v in enumerate(early) if v is None]
        verdicts = list(early)
        for i in pending:
            if candidates[i].backend == "cuda":
                self.progress("building CUDA extension")
                self.prebuild(candidates[i])
        if pending:
            judged = self._run_guarded([candidates[i] for i in pending], self.task,
                                       timed and self.config.time_candidates)
            for i, verdict in zip(pending, judged):
                verdicts[i] = verdict
        if self.config.vary_shapes:
            verdicts = self._vary_shapes(candidates, verdicts)
        return [_with_total(v, time.perf_counter() - started, self.notes) for v in verdicts]

    def prebuild(self, candidate: Candidate) -> float | None:
        """Compile a CUDA candidate ahead, on the CPU; seconds spent, or None if not applicable."""
        if self.device != "cuda" or candidate.backend != "cuda":
            return None
        scratch = Path(tempfile.mkdtemp(prefix="kernelevo-build-"))
        try:
            result = run_job(run_prebuild, {"source": candidate.source, "scratch": str(scratch)},
                             scratch, self.config.build_timeout_s,
                             self.config.output_limit_bytes,
                             environment={**self.child_environment, "CUDA_VISIBLE_DEVICES": ""})
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        final = result.final or {}
        return float(final.get("build_s", 0.0))

    def _static_verdict(self, candidate: Candidate) -> Any:
        if not self.config.static_checks:
            return None
        findings = static.check_source(candidate.source, candidate.backend, self.config.policy)
        if not findings:
            return None
        from kernelevo.evaluate.verdict import verdict_for

        first = findings[0]
        where = f"line {first.line}: " if first.line else ""
        others = [f"{f.reason} (line {f.line}): {f.detail}" for f in findings[1:6]]
        return verdict_for(first.reason, where + first.detail, notes=tuple(others),
                           isolation="static check, not run")

    def _run_guarded(self, candidates: list[Candidate], task: Task,
                     time_them: bool) -> list[Any]:
        """_run, with the judge's own GPU memory running out turned into verdicts."""
        try:
            return self._run(candidates, task, time_them)
        except torch.cuda.OutOfMemoryError as exc:
            from kernelevo.evaluate.verdict import verdict_for

            message = (f"the judge's process ran out of GPU memory holding the reference and "
                       f"the candidate's outputs: {str(exc).splitlines()[0][:300]}")
            return [verdict_for("out_of_memory", message) for _ in candidates]
        finally:
            self.release_memory()

    def release_memory(self) -> None:
        """Give the GPU memory this process cached back to the device, for the workers."""
        if self.device == "cuda":
            torch.cuda.empty_cache()

    def _run(self, candidates: list[Candidate], task: Task, time_them: bool) -> list[Any]:
        """The oracle and the worker run at once; the worker waits for the reference."""
        scratch_root = Path(tempfile.mkdtemp(prefix="kernelevo-"))
        oracle = _OracleRun(self, task, scratch_root / "oracle")
        thread = threading.Thread(target=oracle.run, name="kernelevo-oracle", daemon=True)
        thread.start()
        try:
            verdicts = self._worker(candidates, task, oracle, scratch_root / "worker", time_them)
        finally:
            thread.join()
            shutil.rmtree(scratch_root, ignore_errors=True)
        if oracle.error is not None:
            raise oracle.error
        return verdicts

    def _worker(self, candidates: list[Candidate], task: Task, oracle: "_OracleRun",
                scratch: Path, time_them: bool) -> list[Any]:
        payload = {
            "task_source": task.source, "device": self.device, "dtype": self.config.dtype_name,
            "scratch": str(scratch), "time": time_them, "task_folder": task.folder,
            "candidates": [{"source": c.source, "backend": c.backend} for c in candidates],
            "timing": vars(self.config.timing),
        }
        state = _WorkerState(self, candidates, oracle, time_them)
        result = run_job(run_worker, payload, scratch, self.config.timeout_s,
                         self.config.output_limit_bytes, on_message=state.on_message,
                         environment=self.child_environment,
                         isolate_network=self.config.isolate_network)
        if oracle.error is not None:
            return []
        return build_verdicts(state, result, self)

    def _vary_shapes(self, candidates: list[Candidate], verdicts: list[Any]) -> list[Any]:
        changes = perturb_sizes(self.task.constants)
        passing = [i for i, v in enumerate(verdicts) if v.ok]
        if not changes or not passing:
            return verdicts
        self.progress("re-checking with perturbed sizes")
        varied = self.task.with_constants(changes)
        described = ", ".join(f"{k}={v}" for k, v in changes.items())
        try:
            rechecked = self._run_guarded([candidates[i] for i in passing], varied, False)
        except TaskError as exc:
            self.notes.append(f"shape variation skipped: the reference fails at {described}: {exc}")
            return verdicts
        from kernelevo.evaluate.outcome import shape_variation_verdict

        for i, verdict in zip(passing, rechecked):
            verdicts[i] = shape_variation_verdict(verdicts[i], verdict, described)
        return verdicts


class _OracleRun:
    """Computes the reference in its own process; the judge keeps the outputs."""

    def __init__(self, judge: Judge, task: Task, scratch: Path) -> None:
        self.judge, self.task, self.scratch = judge, task, scratch
        self.done = threading.Event()
        self.reference: dict[str, Any] | None = None
        self.error: Exception | None = None
        self._bundle: dict[str, list[Any]] | None = None

    def run(self) -> None:
        try:
            self.reference = self._compute()
        except Exception as exc:  # handed to the judge's thread, raised there
            kept = (TaskError, torch.cuda.OutOfMemoryError)  # the judge makes a verdict of OOM
            self.error = exc if isinstance(exc, kept) else TaskError(
                f"the reference oracle failed: {type(exc).__name__}: {exc}")
        finally:
            self.done.set()

    def _compute(self) -> dict[str, Any]:
        config, count = self.judge.config, self.judge.config.input_sets
        # One set is a stress set (scaled by s in [32, 128], structure kept) so
        # shortcuts that only hold for the task's input distribution fail:
        # randn inputs then reach beyond 100, where exp() without a max
        # subtraction overflows.
        variant_scale = 2 ** (5 + secrets.randbelow(2000) / 1000)
        payload = {
            "task_source": self.task.source, "device": self.judge.device,
            "dtype": config.dtype_name, "scratch": str(self.scratch),
            "task_folder": self.task.folder,
            "seeds": [secrets.randbits(62) for _ in range(count)],
            "variants": [None] * (count - 1) + [variant_scale],
        }
        result = run_job(run_oracle, payload, self.scratch, config.timeout_s,
                         config.output_limit_bytes, on_message=self._on_message,
                         environment=self.judge.child_environment,
                         isolate_network=config.isolate_network)
        return self._reference_from(result, payload)

    def _on_message(self, message: dict[str, Any]) -> dict[str, Any] | None:
        kind = message.get("kind")
        if kind == "progress":
            self.judge.progress(str(message.get("phase", "")))
        elif kind == "reference":
            self._bundle = import_bundle(message.get("bundle"), self.judge.compare_device,
                                         self.judge.gpu_index)
            return {}
        return None

    def _reference_from(self, result: JobResult, payload: dict[str, Any]) -> dict[str, Any]:
        final = result.final
        errors = [m for m in result.messages if m.get("kind") == "task_error"]
        if errors:
            raise TaskError(errors[0].get("message", "the reference failed"))
        if final is None or self._bundle is None:
            why = ("ran past the time limit" if result.timed_out else
                   f"died ({result.signal_name or f'exit code {result.exit_code}'})")
            raise TaskError(f"the reference oracle {why}:\n{result.log_tail[-2000:]}")
        kept = final["kept_sets"]
        outputs = [self._bundle[f"set_{i}"] for i in range(len(kept))]
        return {
            "outputs": outputs,
            "seeds": [payload["seeds"][i] for i in kept],
            "variants": final["variants_used"],
            "stress": {int(k): v for k, v in final["stress"].items()},
            "passthrough": list(final.get("passthrough", [])),
            "structure": final["structure"],
            "ops": set(final["ops"]),
            "flops": final["flops"], "bytes": final["bytes"],
            "tolerances": [tolerances(name, final["atol"], final["rtol"], self.judge.config)
                           for name in final["output_dtypes"]],
        }


class _WorkerState:
    """Collects the worker's reports and answers its questions while it runs."""

    def __init__(self, judge: Judge, candidates: list[Candidate], oracle: _OracleRun,
                 time_them: bool) -> None:
        self.judge, self.candidates, self.oracle = judge, candidates, oracle
        self.reference: dict[str, Any] = {}
        self.time_them = time_them
        self.decisions: dict[int, Any] = {}
        self.reports: dict[int, dict[str, Any]] = {}
        self.timing: dict[str, Any] | None = None
        self.started = time.perf_counter()
        # Judge-side phases: from the worker's start to its first question
        # (process start, task import, baselines warm-up), and how long it
        # then waited for the oracle's reference.
        self.phases: dict[str, float] = {}

    def on_message(self, message: dict[str, Any]) -> dict[str, Any] | None:
        from kernelevo.evaluate.outcome import judge_candidate

        kind = message.get("kind")
        if kind == "progress":
            self.judge.progress(str(message.get("phase", "")))
        elif kind == "ready":
            return self._ready()
        elif kind == "failed":
            self.decisions[int(message["candidate"])] = ("failed", message)
            return {}
        elif kind == "checked_candidate":
            index = int(message["candidate"])
            self.reports[index] = message
            self.judge.progress("judging outputs")
            self.decisions[index] = judge_candidate(self, index, message)
            self.judge.progress("judged")
            return {}
        elif kind == "checked":
            passing = [i for i, d in self.decisions.items() if d[0] == "passed"]
            return {"time": passing if self.time_them else []}
        elif kind == "timing":
            self.timing = message
        return None

    def _ready(self) -> dict[str, Any]:
        """Release the worker once the reference exists (or tell it to stop)."""
        asked = time.perf_counter()
        self.phases["worker_start"] = asked - self.started
        self.oracle.done.wait()
        self.phases["reference_wait"] = time.perf_counter() - asked
        if self.oracle.reference is None:
            return {"abort": True}
        self.reference = self.oracle.reference
        self.judge.progress("loading candidate")
        return {key: self.reference[key] for key in ("seeds", "variants", "tolerances")}


def _with_total(verdict: Any, total_s: float, notes: list[str]) -> Any:
    from dataclasses import replace

    phases = dict(verdict.phases_s)
    phases["total"] = round(total_s, 3)
    return replace(verdict, phases_s=phases, notes=tuple(notes) + tuple(verdict.notes))
