"""A suite's solutions judged on warm lanes: several tasks at once per GPU, builds ahead.

Each lane judges one task at a time with a judge that keeps its next oracle
and worker started (standby), so every solution after a task's first finds
them warm (suite/lane_judge.py). Lanes of one GPU share it as
evaluate/parent/gate.py allows: checks side by side, timing phases one at a time;
and they share its memory: a lane takes the next task that fits beside the
others (suite/schedule.py), and a solution that runs out of memory beside
them is judged again alone (suite/alone.py). Tasks come quickest first.
CUDA solutions are compiled ahead on the CPU, in parallel, in the order the
lanes will reach them, so a lane waits for nvcc only when the builds fall
behind. Once the suite has its first row, a lane takes its next task ahead
and starts that task's first session while it judges its current task's
last solution, so no later task's first candidate waits for processes to
start or for baselines to compile; before it, those sessions would only
slow the first verdicts down. Baselines are timed once per task, by the
task's first worker before any solution loads, and kept in the store on
disk for the next suite (evaluate/parent/baseline_store.py); each solution is
timed beside a brief drift probe of them.
"""

from __future__ import annotations

import functools
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
from kernelevo.evaluate.parent.baseline_store import BaselineStore
from kernelevo.suite.alone import GpuRoom
from kernelevo.suite.footprint import lane_processes, measure_footprint
from kernelevo.suite.lane_peaks import LanePeaks, peaks_key
from kernelevo.suite.lane_judge import LaneContext, MakeRow, Row, TaskLane
from kernelevo.suite.schedule import MemoryBook, PlannedTask, TaskQueue
from kernelevo.suite.tasks import Solution, SuiteTask
from kernelevo.suite.time_spent import LaneRecord, LaneStats

Load = Callable[[SuiteTask], tuple[Any, dict[str, int]]]
Memory = Callable[[int | None], tuple[int, int] | None]
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


def plan_tasks(jobs: list[tuple[SuiteTask, list[Solution]]]) -> list[PlannedTask]:
    """The tasks in the suite's order, each marked when a solution needs a CUDA build."""
    planned = []
    for position, (task, pending) in enumerate(jobs):
        planned.append(PlannedTask(task, pending, position, any(
            _backend(solution) == "cuda" for solution in pending)))
    return planned


def _backend(solution: Solution) -> str | None:
    try:
        return load_candidate(solution.path).backend
    except KernelEvoError:
        return None  # the lane reports it


def judge_on_lanes(jobs: list[tuple[SuiteTask, list[Solution]]], load: Load,
                   config: EvalConfig, store: BaselineStore | None, gpu: str | None,
                   gpus: list[int | None], lanes: int, make_row: MakeRow,
                   builds: BuildsAhead | None,
                   environment: Callable[[int | None], dict[str, str]],
                   warm_ahead: bool = False, memory: Memory | None = None,
                   record: LaneRecord | None = None, head_start_s: float = 0.0,
                   peaks: LanePeaks | None = None) -> Iterator[Row]:
    """Rows as solutions are judged; `lanes` tasks at a time on each of `gpus`.

    Tasks are handed out quickest first, each to a lane whose GPU has the
    memory for it (`memory` reads a GPU's free and total bytes; None: no
    such check). With `warm_ahead` (a GPU's cores to spare), once the suite
    has its first row a lane takes its next task before it judges its
    current task's last solution, and starts that task's first session then
    (Judge.warm_up): the process start, the task's import and its
    baselines' compile run beside the last solution, not in the next
    task's first verdict. With `head_start_s`, each GPU's first lane starts
    alone: the others take their first task once the suite has its first
    row, or after that many seconds. With `peaks`, a task whose GPU peaks an
    earlier suite on this GPU model recorded has its lane sized from them, and
    each passing row's peaks are recorded (suite/lane_peaks.py).
    """
    record = record or LaneRecord()
    planned = plan_tasks(jobs)
    slots = [gpu_index for gpu_index in gpus for _ in range(max(1, lanes))]
    sized = memory is not None
    tasks = TaskQueue(planned, lambda entry: _prepare(entry, load, config, sized, peaks),
                      config.import_timeout_s, len(slots))
    tasks.start()
    if builds is not None and config.device != "cpu":
        builds.submit([s for entry in planned if entry.needs_build for s in entry.pending],
                      config, environment(gpus[0]))
    books = {index: MemoryBook(functools.partial(memory, index)) for index in gpus} \
        if memory is not None else {}
    suite = _Lanes(tasks, {index: GpuRoom() for index in gpus}, books, builds, record,
                   warm_ahead, head_start_s, peaks if sized else None)
    for number, gpu_index in enumerate(slots):
        book = books.get(gpu_index)
        context = LaneContext(config, store, gpu, gpu_index, make_row, suite.rooms[gpu_index],
                              number, book.total_bytes if book else None)
        suite.add(LaneStats(number, gpu_index), context)
    suite.launch()
    yield from suite.rows()


class _Lanes:
    """The lanes of a suite: their threads, what they share, the rows they send."""

    def __init__(self, tasks: TaskQueue, rooms: dict[int | None, GpuRoom],
                 books: dict[int | None, MemoryBook], builds: BuildsAhead | None,
                 record: LaneRecord, warm_ahead: bool, head_start_s: float = 0.0,
                 peaks: LanePeaks | None = None) -> None:
        self.tasks, self.rooms, self.books, self.builds = tasks, rooms, books, builds
        self.record, self.warm_ahead, self.head_start_s = record, warm_ahead, head_start_s
        self.peaks = peaks
        self._leads: set[int | None] = set()  # GPUs whose first lane is added
        self.sent: queue.Queue[Row | BaseException | None] = queue.Queue()
        self.stop, self.first_row = threading.Event(), threading.Event()
        self._threads: list[threading.Thread] = []

    def add(self, stats: LaneStats, context: LaneContext) -> None:
        self.record.lanes.append(stats)
        context.room.join(stats.lane)  # before any lane judges: each counts as company
        leads = stats.gpu_index not in self._leads
        self._leads.add(stats.gpu_index)
        self._threads.append(threading.Thread(target=self._lane, args=(stats, context, leads),
                                              daemon=True, name=f"suite-lane-{stats.lane}"))

    def launch(self) -> None:
        for thread in self._threads:
            thread.start()

    def _head_start(self, stats: LaneStats) -> None:
        """Wait for the suite's first row, at most `head_start_s` (a stop ends the wait)."""
        started = time.monotonic()
        deadline = started + self.head_start_s
        while not self.first_row.is_set() and not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.first_row.wait(min(left, 0.2))
        stats.head_start_wait_s = time.monotonic() - started

    def _lane(self, stats: LaneStats, context: LaneContext, leads: bool) -> None:
        upcoming: list[_TaskRun] = []
        book = self.books.get(stats.gpu_index)

        def take(wait: bool) -> _TaskRun | None:
            entry, reservation, memory_wait_s = self.tasks.take(
                lambda planned: _admit(planned, book), wait, self.stop.is_set, stats.lane)
            stats.memory_wait_s += memory_wait_s
            return None if entry is None else _TaskRun(entry, reservation, book, context)

        def take_ahead() -> None:
            if self.warm_ahead and not upcoming and not self.stop.is_set() and (
                    run := take(False)):
                upcoming.append(run)
                run.warm_up_after(self.first_row, self.stop)

        try:
            if not leads and self.head_start_s > 0:
                self._head_start(stats)
            while not self.stop.is_set():
                current = upcoming.pop() if upcoming else take(True)
                if current is None:
                    return
                self.record.mark("the first task taken, its judge made")
                for row in current.rows(self.builds, before_last=take_ahead):
                    # when it ended, in seconds since this run of the suite began: with
                    # its wall time, where it lies beside the other lanes' rows
                    row["ended_s"] = round(self.record.since_start(), 2)
                    if self.peaks is not None and current.peaks_key and \
                            row.get("reason") == "passed" and row.get("gpu_peak_bytes"):
                        self.peaks.record(current.peaks_key, row["gpu_peak_bytes"])
                    stats.rows += 1
                    self.first_row.set()
                    self.sent.put(row)
                    if self.stop.is_set():
                        return
        except BaseException as exc:  # raised again in the caller's thread
            self.sent.put(exc)
        finally:
            for run in upcoming:  # stopped with a task taken ahead: its session goes
                run.close()
            context.room.quit(stats.lane)
            stats.ended_at_s = self.record.since_start()
            self.sent.put(None)

    def rows(self) -> Iterator[Row]:
        """The lanes' rows as they come, until every lane has ended."""
        running = len(self._threads)
        try:
            while running:
                row = self.sent.get()
                if row is None:
                    running -= 1
                elif isinstance(row, BaseException):
                    raise row
                else:
                    if self.record.first_row_at_s is None:
                        self.record.first_row_at_s = self.record.since_start()
                    yield row
        finally:  # an error, a Ctrl-C or a consumer gone: lanes start nothing new
            self.stop.set()


def _prepare(entry: PlannedTask, load: Load, config: EvalConfig, sized: bool,
             peaks: LanePeaks | None = None) -> None:
    """Load the task (shrunk where asked) and, where `sized`, say what a lane judging it
    holds on the GPU: what an earlier suite measured (`peaks`), else an estimate."""
    from kernelevo.evaluate.shared.gradients import backward_on

    entry.loaded, entry.sizes = load(entry.task)
    if not sized:
        return
    # a task of several solutions keeps a standby session beside the evaluation
    sessions = 2 if len(entry.pending) > 1 else 1
    if peaks is not None:
        entry.peaks_key = peaks_key(entry.loaded.source, config.dtype_name, config.input_sets,
                                    backward_on(entry.loaded, config))
        measured = peaks.lane_bytes(entry.peaks_key, sessions)
        if measured is not None:
            entry.lane_bytes, entry.lane_bytes_from = measured, "peaks"
            entry.lane_processes = lane_processes(sessions, peaks.rechecked(entry.peaks_key))
            return
    try:
        footprint = measure_footprint(entry.loaded, config.dtype_name)
    except Exception:  # noqa: BLE001 - size unknown (0): the run alone catches the rest
        return
    entry.lane_bytes = footprint.lane_bytes(config.input_sets, sessions, config.vary_shapes)
    entry.lane_bytes_from = "sizes"
    entry.lane_processes = lane_processes(sessions, config.vary_shapes)


def _admit(entry: PlannedTask, book: MemoryBook | None) -> int | None:
    """A reservation for the task on the lane's GPU (0: none needed), or None: no room now."""
    if book is None or entry.error is not None:
        return 0
    return book.admit(entry.lane_bytes)


class _TaskRun:
    """One task's pending solutions on a lane: its judge made up front, its memory reserved."""

    def __init__(self, entry: PlannedTask, reservation: int, book: MemoryBook | None,
                 context: LaneContext) -> None:
        self.task, self.pending, self.peaks_key = entry.task, entry.pending, entry.peaks_key
        self._book, self._reservation = book, reservation
        self._room, self._lane_number = context.room, context.lane
        self._lock = threading.Lock()
        self._judging = self._closed = False
        self.lane: TaskLane | None = None
        self.errors: list[Row] = []
        make_row, gpu = context.make_row, context.gpu
        if entry.error is not None:  # a task that cannot load is a row per solution
            self.errors = [make_row(entry.task, solution, "task_error", gpu=gpu,
                                    message=entry.error) for solution in entry.pending]
            return
        extra = {"gpu": gpu, "gpu_index": context.gpu_index, "sizes": entry.sizes,
                 "lane": context.lane, "lane_bytes": entry.lane_bytes,
                 **({"lane_bytes_from": entry.lane_bytes_from,
                     "lane_processes": entry.lane_processes} if entry.lane_bytes_from else {})}
        try:
            self.lane = TaskLane(entry.task, entry.loaded, context, extra)
        except KernelEvoError as exc:
            self.errors = [make_row(entry.task, solution, "task_error", gpu=gpu,
                                    message=str(exc)) for solution in entry.pending]

    def warm_up_after(self, first_row: threading.Event, stop: threading.Event) -> None:
        """Start the first solution's session (its processes, imports and baselines) once
        the suite has its first row: now if it has, else in a thread that waits for it."""
        if first_row.is_set():
            self._warm_up()
            return

        def wait_then_warm() -> None:
            while not first_row.wait(0.2):
                if stop.is_set() or self._closed or self._judging:
                    return
            self._warm_up()

        threading.Thread(target=wait_then_warm, name="suite-warm-ahead", daemon=True).start()

    def _warm_up(self) -> None:
        if self.lane is None:
            return
        with self._room.inside(self._lane_number):
            with self._lock:  # not once its judging began, nor once it is closed
                if not (self._judging or self._closed):
                    self.lane.judge.warm_up()

    def rows(self, builds: BuildsAhead | None,
             before_last: Callable[[], None]) -> Iterator[Row]:
        """Each solution's row in turn; `before_last` is called before the last is judged."""
        yield from self.errors
        if self.lane is None:
            self.close()
            before_last()
            return
        try:
            for index, solution in enumerate(self.pending):
                last = index + 1 == len(self.pending)
                if last:
                    before_last()
                waited = builds.wait(solution) if builds is not None else 0.0
                with self._lock:
                    self._judging = True
                yield self.lane.judge_one(solution, waited, more=not last)
        finally:
            self.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.lane is not None:
            self.lane.close()
        if self._book is not None:
            self._book.release(self._reservation)
