"""A suite's solutions judged on warm lanes: several tasks at once per GPU, builds ahead.

Each lane judges one task at a time with a judge that keeps its next oracle
and worker started (standby), so every solution after a task's first finds
them warm. Lanes of one GPU share it as evaluate/gate.py allows: checks side
by side, timing phases one at a time. CUDA solutions are compiled ahead on
the CPU, in parallel, in the order the lanes will reach them, so a lane waits
for nvcc only when the builds fall behind. A lane takes its next task ahead
and starts that task's first session while it judges its current task's last
solution, so no task's first candidate waits for processes to start or for
baselines to compile. Baselines are timed once per task, by the task's first
worker before any solution loads, and kept in the store on disk for the next
suite (evaluate/baseline_store.py); each solution is timed beside a brief
drift probe of them.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.errors import KernelEvoError
from kernelevo.evaluate.baseline_store import BaselineStore
from kernelevo.suite.metrics import BASELINES
from kernelevo.suite.tasks import Solution, SuiteTask

Row = dict[str, Any]
MakeRow = Callable[..., Row]
# Compiles at once: each nvcc holds about 1.5 GB and most of a core.
_BUILD_MEMORY_BYTES = 3 << 30


def _cores() -> int:
    found = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return found or 2


def build_workers(wanted: int | None = None) -> int:
    """Concurrent CUDA builds: `wanted`, else what the cores and memory hold.

    A build runs three to four compilers at once (the host file, the CUDA
    file's host and device chains), so a quarter of the cores: more starved
    the lanes (16 cores, 8 builds at once: every core busy, lanes waiting).
    """
    if wanted:
        return wanted
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = 16 << 30
    return max(1, min(_cores() // 4, memory // _BUILD_MEMORY_BYTES, 4))


def default_lanes(gpus: int = 1) -> int:
    """Tasks judged at once per GPU: the cores are the limit (each lane keeps two or
    three sessions of two processes busy), from 2 to 6. On the H200 machine (16 cores)
    six lanes judged 1.8x the candidates of three (bench/RESULTS.md)."""
    return max(2, min(6, _cores() // (2 * max(1, gpus))))


class BuildsAhead:
    """CUDA solutions compiled on the CPU ahead of their judging, a future per file."""

    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="suite-build")
        self._futures: dict[Path, Future] = {}

    def submit(self, solutions: list[Solution], config: EvalConfig,
               environment: dict[str, str]) -> None:
        from kernelevo.evaluate.cuda.prebuild import prebuild_source

        for solution in solutions:
            try:
                candidate = load_candidate(solution.path)
            except KernelEvoError:
                continue  # the lane reports it
            if candidate.backend == "cuda":
                self._futures[solution.path] = self._pool.submit(
                    prebuild_source, candidate.source, config, environment)

    def wait(self, solution: Solution) -> float:
        """Seconds this solution's lane waited for its build (0 when none or done)."""
        future = self._futures.get(solution.path)
        if future is None or future.done():
            return 0.0
        started = time.perf_counter()
        try:
            future.result()
        except Exception:  # a build that broke is judged (and reported) by the worker
            pass
        return time.perf_counter() - started

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class TaskLane:
    """Judges one task's solutions in turn on one GPU, keeping the next session warm."""

    def __init__(self, task: SuiteTask, loaded: Any, config: EvalConfig,
                 store: BaselineStore | None, gpu_index: int | None, make_row: MakeRow,
                 extra: dict[str, Any]) -> None:
        self.task, self.loaded, self.store = task, loaded, store
        self.gpu_index, self.make_row, self.extra = gpu_index, make_row, extra
        self.measure = config.timing.measure
        self.wanted = tuple(b for b in BASELINES if b in config.timing.baselines)
        self.config = config
        self.judge = self._judge()

    def _judge(self) -> Any:
        from kernelevo.evaluate.judge import Judge

        return Judge(self.loaded, self.config, gpu_index=self.gpu_index, standby=True,
                     baseline_store=self.store)

    def judge_one(self, solution: Solution, waited_s: float, more: bool = True) -> Row:
        """One solution's row; `more` when another solution of the task follows it.

        Only then does the judge keep a next session warm (standby): for the
        last one, that session's oracle, worker and baseline warm-up would be
        started only to be killed, taking cores and the GPU from other lanes.
        """
        from kernelevo.evaluate.verdict import speedup

        self.judge.standby = more
        started = time.perf_counter()
        try:
            verdict = self.judge.evaluate(load_candidate(solution.path))
        except KernelEvoError as exc:
            return self.make_row(self.task, solution, "bad_candidate", message=str(exc),
                                 **self.extra)
        own = verdict.measures.get(self.measure, {}).get("candidate")
        # A CPU run, or a candidate that never reached timing, has no baselines.
        baselines = {n: s for n, s in verdict.measures.get(self.measure, {}).items()
                     if n != "candidate"}
        how = verdict.environment.get("baselines", "")
        source = "none" if not baselines else "stored" if how.startswith("stored") \
            else "measured"
        gains = {b: speedup(baselines.get(b), own) if own else None for b in self.wanted}
        return self.make_row(
            self.task, solution, verdict.reason, status=verdict.status,
            passed_kernel=verdict.passed_kernel, message=verdict.message[:500],
            measure=verdict.timing_measure or None, speedup=gains,
            candidate_ms=own.median_ms if own else None,
            baseline_ms={n: s.median_ms for n, s in baselines.items()},
            baseline_source=source, flags=list(verdict.flags),
            timed_under=verdict.environment.get("timed_under"),
            build_wait_s=round(waited_s, 2),
            wall_s=round(time.perf_counter() - started + waited_s, 2),
            phases_s={k: round(v, 2) for k, v in verdict.phases_s.items()},
            measures=_by_measure(verdict), **self.extra)

    def close(self) -> None:
        self.judge.close()


def _by_measure(verdict: Any) -> dict[str, dict[str, Any]]:
    """Every measure's milliseconds, speedups and speedup intervals, as the verdict has them."""
    from kernelevo.evaluate.verdict import speedup

    shown: dict[str, dict[str, Any]] = {}
    for measure, stats in verdict.measures.items():
        own = stats.get("candidate")
        if own is None:
            continue
        shown[measure] = {
            "ms": {name: s.median_ms for name, s in stats.items()},
            "speedup": {name: speedup(s, own) for name, s in stats.items() if name != "candidate"},
            "range": dict(verdict.speedup_ranges.get(measure, {}))}
    return shown


def judge_on_lanes(jobs: list[tuple[SuiteTask, list[Solution]]],
                   load: Callable[[SuiteTask], tuple[Any, dict[str, int]]],
                   config: EvalConfig, store: BaselineStore | None, gpu: str | None,
                   gpus: list[int | None], lanes: int, make_row: MakeRow,
                   builds: BuildsAhead | None,
                   environment: Callable[[int | None], dict[str, str]],
                   warm_ahead: bool = False) -> Iterator[Row]:
    """Rows as solutions are judged; `lanes` tasks at a time on each of `gpus`.

    With `warm_ahead` (a GPU's cores to spare), a lane takes its next task
    before it judges its current task's last solution, and starts that task's
    first session then (Judge.warm_up): the process start, the task's import
    and its baselines' compile run beside the last solution, not in the next
    task's first verdict.
    """
    tasks: queue.Queue[tuple[SuiteTask, list[Solution]] | None] = queue.Queue()
    for job in jobs:
        tasks.put(job)
    if builds is not None and config.device != "cpu":
        for _, solutions in jobs:
            builds.submit(solutions, config, environment(gpus[0]))
    rows: queue.Queue[Row | BaseException | None] = queue.Queue()
    slots = [gpu for gpu in gpus for _ in range(max(1, lanes))]
    stop = threading.Event()

    def lane(gpu_index: int | None) -> None:
        upcoming: list[_TaskRun] = []

        def take() -> _TaskRun | None:
            try:
                job = tasks.get_nowait()
            except queue.Empty:
                return None
            return _TaskRun(*job, load, config, store, gpu, gpu_index, make_row)

        def take_ahead() -> None:
            if warm_ahead and not upcoming and not stop.is_set() and (run := take()) is not None:
                run.warm_up()
                upcoming.append(run)

        try:
            while not stop.is_set():
                current = upcoming.pop() if upcoming else take()
                if current is None:
                    return
                for row in current.rows(builds, before_last=take_ahead):
                    rows.put(row)
                    if stop.is_set():
                        return
        except BaseException as exc:  # raised again in the caller's thread
            rows.put(exc)
        finally:
            for run in upcoming:  # stopped with a task taken ahead: its session goes
                run.close()
            rows.put(None)

    threads = [threading.Thread(target=lane, args=(gpu,), name=f"suite-lane-{i}", daemon=True)
               for i, gpu in enumerate(slots)]
    for thread in threads:
        thread.start()
    running = len(threads)
    try:
        while running:
            row = rows.get()
            if row is None:
                running -= 1
            elif isinstance(row, BaseException):
                raise row
            else:
                yield row
    finally:  # an error, a Ctrl-C or a consumer gone: lanes start nothing new
        stop.set()


class _TaskRun:
    """One task's pending solutions on a lane: the task loaded and its lane made up front."""

    def __init__(self, task: SuiteTask, pending: list[Solution],
                 load: Callable[[SuiteTask], tuple[Any, dict[str, int]]], config: EvalConfig,
                 store: BaselineStore | None, gpu: str | None, gpu_index: int | None,
                 make_row: MakeRow) -> None:
        self.task, self.pending = task, pending
        self.lane: TaskLane | None = None
        self.errors: list[Row] = []
        try:
            loaded, sizes = load(task)
        except Exception as exc:  # a task that cannot load is a row per solution, not the end
            self.errors = [make_row(task, solution, "task_error", gpu=gpu,
                                    message=f"{type(exc).__name__}: {exc}")
                           for solution in pending]
            return
        extra = {"gpu": gpu, "gpu_index": gpu_index, "sizes": sizes}
        try:
            self.lane = TaskLane(task, loaded, config, store, gpu_index, make_row, extra)
        except KernelEvoError as exc:
            self.errors = [make_row(task, solution, "task_error", gpu=gpu, message=str(exc))
                           for solution in pending]

    def warm_up(self) -> None:
        """Start the first solution's session now (its processes, imports and baselines)."""
        if self.lane is not None:
            self.lane.judge.warm_up()

    def rows(self, builds: BuildsAhead | None,
             before_last: Callable[[], None]) -> Iterator[Row]:
        """Each solution's row in turn; `before_last` is called before the last is judged."""
        yield from self.errors
        if self.lane is None:
            before_last()
            return
        try:
            for index, solution in enumerate(self.pending):
                last = index + 1 == len(self.pending)
                if last:
                    before_last()
                waited = builds.wait(solution) if builds is not None else 0.0
                yield self.lane.judge_one(solution, waited, more=not last)
        finally:
            self.close()

    def close(self) -> None:
        if self.lane is not None:
            self.lane.close()
