"""Judge every solution of every task of a suite, one row per solution, resumable.

Rows go to `<out>/results.jsonl` as each is judged (flushed and synced), so a
killed suite keeps what it finished and `resume=True` judges only the rest.
The summary (`suite.json`), a markdown table (`suite.md`) and an HTML page
(`suite.html`) are written from all the rows at the end, or when the suite is
stopped (Ctrl-C, SIGTERM): then from the rows judged so far, with where their
time went (`SuiteStopped`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator

from kernelevo.config import EvalConfig
from kernelevo.errors import KernelEvoError, TaskError
from kernelevo.evaluate.parent.baseline_store import BaselineStore, gpu_model
from kernelevo.run.signals import interrupts_deferred
from kernelevo.schema import settings_to_dict
from kernelevo.suite.eta import Eta
from kernelevo.suite.evolve import SearchBudget, evolve_task
from kernelevo.suite.metrics import SuiteResult, best_of, summarize
from kernelevo.suite.tasks import Solution, SuiteTask, expand_specs, find_solutions
from kernelevo.suite.time_spent import LaneRecord, time_spent

RESULTS, PLAN = "results.jsonl", "plan.json"
Progress = Callable[[str], None]

# Until a GPU's first lane has its first row (at most this long), its other
# lanes start nothing: six lanes starting their processes at once took 9-11 s
# each to start on 16 cores (CUDA's context 2.5-3.5 s under that load, 1.5 s
# alone), and their oracles held the GPU while the first row's timing waited
# (5.6 s; bench/RESULTS.md, "The suite against KernelBench's harness").
HEAD_START_S = 6.0


class SuiteStopped(KeyboardInterrupt):
    """The suite was stopped before its end; `result` holds the rows judged until then."""

    def __init__(self, result: SuiteResult, stop: KeyboardInterrupt) -> None:
        super().__init__(str(stop) or "interrupted")
        self.result, self.stop = result, stop


@dataclass(frozen=True)
class SuitePlan:
    """What a suite judges and how; `out` holds its results."""

    specs: tuple[str, ...]
    solutions: Path | None
    out: Path
    config: EvalConfig = field(default_factory=EvalConfig)
    kernelbench_dir: str | None = None
    max_input_elements: int | None = None  # shrink tasks whose inputs hold more values
    resume: bool = False
    reuse_baselines: bool = True  # baseline times stored per GPU model
    search: SearchBudget | None = None  # evolve each task (solutions seed it) instead of judging
    gpus: tuple[int, ...] = ()  # judge tasks side by side, one per GPU (evolve: its judges)
    lanes: int | None = None  # tasks judged at once per GPU, timing in turn (None: by cores)
    build_workers: int | None = None  # CUDA builds at once, ahead (None: cores and memory)
    # seconds the other lanes of a GPU wait for its first lane's first row (lanes.py)
    head_start_s: float = HEAD_START_S

    def __post_init__(self) -> None:
        if self.lanes is not None and self.lanes < 1:
            raise TaskError(f"lanes must be at least 1, got {self.lanes}")
        if self.build_workers is not None and self.build_workers < 1:
            raise TaskError(f"build workers must be at least 1, got {self.build_workers}")
        if self.head_start_s < 0:
            raise TaskError(f"the head start must be 0 s or more, got {self.head_start_s}")

    def fingerprint(self) -> dict[str, Any]:
        """What must match for a resumed suite to continue the same work."""
        return {"specs": list(self.specs),
                "solutions": str(self.solutions.resolve()) if self.solutions else None,
                "max_input_elements": self.max_input_elements,
                "config": settings_to_dict(self.config),
                "search": settings_to_dict(self.search) if self.search else None,
                "gpus": list(self.gpus)}


def run_suite(plan: SuitePlan, progress: Progress | None = None) -> SuiteResult:
    say = progress or (lambda line: None)
    record = LaneRecord()  # its clock starts with the suite
    tasks = expand_specs(list(plan.specs), plan.kernelbench_dir)
    if plan.solutions is None and plan.search is None:
        raise TaskError("give the solutions to judge (--solutions DIR), or --evolve to search")
    solutions = find_solutions(plan.solutions, tasks) if plan.solutions else {}
    done = _open_out(plan)
    _start_judging_processes(plan.config.device)
    record.mark("tasks and solutions read")
    if plan.search is not None:
        _search_tasks(plan, tasks, solutions, done, say)
        return _finish(plan, tasks, None)
    judged: list[dict[str, Any]] = []
    gpu: str | None = None
    rows: Generator[dict[str, Any], None, None] | None = None
    try:
        gpu = gpu_model() if plan.config.device != "cpu" else None
        # Fresh: the suite's tasks are timed again, and their new times stored.
        store = BaselineStore.for_gpu(_cache_dir(), gpu, fresh=not plan.reuse_baselines) \
            if gpu else None
        record.mark("the GPU named")
        total = sum(max(1, len(solutions.get(t.key, []))) for t in tasks)
        jobs = _pending(plan, tasks, solutions, done, gpu)
        count = total - sum(len(pending) for _, pending in jobs)
        lanes = _lanes(plan)
        record.mark("lanes counted")
        eta = Eta({task.key: len(pending) for task, pending in jobs},
                  lanes[1] * max(1, len(plan.gpus)))
        rows = _judge_jobs(plan, jobs, store, gpu, lanes, record)
        for row in rows:
            with interrupts_deferred():  # a row in the file is a row in the account
                _append(plan.out, row)
                judged.append(row)
            count += 1
            eta.finished(row)
            left = eta.text()
            say(f"[{count}/{total}] {_line(row)}" + (f"  ({left})" if left else ""))
    except KeyboardInterrupt as stop:
        if rows is not None:
            rows.close()  # the lanes end, and their processes with them, before the summary
        raise SuiteStopped(_finish(plan, tasks, gpu, time_spent(
            judged, record, record.since_start())), stop) from stop
    return _finish(plan, tasks, gpu, time_spent(judged, record, record.since_start()))


def _start_judging_processes(device: str) -> None:
    """The judges' forkserver, started once the input is known good and before this
    process imports torch: its imports (seconds) run while the suite sizes its tasks,
    not before the first task's session."""
    from kernelevo.evaluate.sandbox.jobs import start_forkserver_for

    start_forkserver_for(device)


def _pending(plan: SuitePlan, tasks: list[SuiteTask], solutions: dict[str, list[Solution]],
             done: set[tuple[str, int | None]], gpu: str | None,
             ) -> list[tuple[SuiteTask, list[Solution]]]:
    """The tasks with solutions still to judge; a task with none gets its row now."""
    jobs = []
    for task in tasks:
        files = solutions.get(task.key, [])
        pending = [s for s in files if (task.key, s.sample) not in done]
        if not files and (task.key, None) not in done:
            _append(plan.out, _row(task, None, "no_solution", gpu=gpu,
                                   message="no solution file for this task"))
        if pending:
            jobs.append((task, pending))
    return jobs


def _lanes(plan: SuitePlan) -> tuple[str, int]:
    """(device, lanes per GPU): --lanes, else as many as the cores and the free memory
    hold on a GPU; one on the CPU unless asked (it has no GPU to keep busy)."""
    from kernelevo.evaluate.parent.judge import resolve_device
    from kernelevo.suite.lanes import default_lanes
    from kernelevo.suite.schedule import gpu_memory, lanes_for_memory

    device = resolve_device(plan.config)
    if plan.lanes or device != "cuda":
        return device, plan.lanes or 1
    gpus: list[int | None] = list(plan.gpus) or [None]
    free = [found[0] for found in map(gpu_memory, gpus) if found is not None]
    return device, lanes_for_memory(default_lanes(len(gpus)), min(free) if free else None)


def _judge_jobs(plan: SuitePlan, jobs: list[tuple[SuiteTask, list[Solution]]],
                store: BaselineStore | None, gpu: str | None, lanes: tuple[str, int],
                record: LaneRecord) -> Generator[dict[str, Any], None, None]:
    """Rows as solutions are judged, on `lanes` per GPU, CUDA builds ahead."""
    from kernelevo.evaluate.parent.judge import child_environment
    from kernelevo.suite.lane_peaks import LanePeaks
    from kernelevo.suite.lanes import BuildsAhead, build_workers, judge_on_lanes
    from kernelevo.suite.schedule import gpu_memory

    device, per_gpu = lanes
    gpus: list[int | None] = list(plan.gpus) or [None]
    builds = BuildsAhead(build_workers(plan.build_workers)) if device == "cuda" else None
    try:
        yield from judge_on_lanes(jobs, lambda task: _load(plan, task), plan.config, store, gpu,
                                  gpus, per_gpu, _row, builds,
                                  lambda index: child_environment(device, index),
                                  warm_ahead=device == "cuda",
                                  head_start_s=plan.head_start_s if device == "cuda" else 0.0,
                                  memory=gpu_memory if device == "cuda" else None,
                                  record=record,
                                  peaks=LanePeaks.for_gpu(_cache_dir(), gpu) if gpu else None)
    finally:
        if builds is not None:
            builds.close()


def _load(plan: SuitePlan, task: SuiteTask) -> tuple[Any, dict[str, int]]:
    """The task, shrunk to --max-input-elements where asked; (task, sizes changed)."""
    loaded = task.load()
    if not plan.max_input_elements:
        return loaded, {}
    from kernelevo.suite.shrink import shrink_to

    return shrink_to(loaded, plan.max_input_elements)


def _finish(plan: SuitePlan, tasks: list[SuiteTask], gpu: str | None,
            spent: dict[str, Any] | None = None) -> SuiteResult:
    from kernelevo.suite.render import write_outputs

    rows = read_rows(plan.out)
    results = [best_of(t.key, [r for r in rows if r["task"] == t.key
                               and r["reason"] != "no_solution"]) for t in tasks]
    tokens = sum(r.get("tokens", 0) for r in rows)
    usd = sum(r.get("usd", 0.0) for r in rows)
    result = SuiteResult(rows, results, summarize(results, tokens, usd), plan.out,
                         gpu or next((r["gpu"] for r in rows if r.get("gpu")), None), spent)
    write_outputs(result)
    return result


def _search_tasks(plan: SuitePlan, tasks: list[SuiteTask], solutions: dict[str, list[Solution]],
                  done: set[tuple[str, int | None]], say: Progress) -> None:
    """One evolve run per task not yet in the results; a killed task's run is resumed."""
    assert plan.search is not None
    pending = [t for t in tasks if (t.key, None) not in done]
    for number, task in enumerate(pending, len(tasks) - len(pending) + 1):
        seeds = [s.path for s in solutions.get(task.key, [])]
        try:
            loaded = task.load()
            if plan.max_input_elements:
                from kernelevo.suite.shrink import shrink_to

                loaded, _ = shrink_to(loaded, plan.max_input_elements)
            fields = evolve_task(plan.out, task.key, loaded, seeds, plan.config, plan.search,
                                 plan.gpus)
            row = _row(task, None, fields.pop("reason"), **fields)
        except KernelEvoError as exc:
            row = _row(task, None, "search_error", message=str(exc))
        _append(plan.out, row)
        gains = ", ".join(f"{b} {g:.2f}x" for b, g in row.get("speedup", {}).items() if g)
        say(f"[{number}/{len(tasks)}] {task.key}: {row['reason']}"
            + (f" ({gains})" if gains else "") + f", {row.get('tokens', 0)} tokens")


def _row(task: SuiteTask, solution: Solution | None, reason: str, **fields: Any) -> dict:
    row = {"task": task.key, "sample": solution.sample if solution else None,
           "file": solution.path.name if solution else None, "reason": reason,
           "status": fields.pop("status", "failed"), "passed_kernel": False,
           "speedup": {}, "tokens": 0, "usd": 0.0}
    row.update(fields)
    return row


def _line(row: dict[str, Any]) -> str:
    gains = ", ".join(f"{b} {g:.2f}x" for b, g in row.get("speedup", {}).items() if g)
    return f"{row['task']} sample {row['sample']}: {row['reason']}" + (f" ({gains})" if gains
                                                                        else "")


def _open_out(plan: SuitePlan) -> set[tuple[str, int | None]]:
    """The (task, sample) pairs already judged; checks a resumed suite is the same suite."""
    try:
        plan.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TaskError(f"--out {plan.out}: cannot make the folder ({exc.strerror or exc}): "
                        "give --out a folder you can write to") from None
    plan_file, results = plan.out / PLAN, plan.out / RESULTS
    fingerprint = json.loads(json.dumps(plan.fingerprint()))
    if results.exists() and results.stat().st_size:
        if not plan.resume:
            raise TaskError(f"{plan.out} holds a suite's results already: pass --resume to "
                            "continue it, or give another --out folder")
        try:
            before = json.loads(plan_file.read_text())
        except (OSError, ValueError):
            before = None
        if before != fingerprint:
            raise TaskError(f"{plan.out} holds a different suite (its tasks, solutions or "
                            f"settings differ, see {plan_file}): give another --out folder")
    plan_file.write_text(json.dumps(fingerprint, indent=1))
    _drop_cut_line(results)
    return {(r["task"], r["sample"]) for r in read_rows(plan.out)}


def _drop_cut_line(results: Path) -> None:
    """A line cut short by a kill would swallow the next row: cut it off."""
    if not results.exists():
        return
    data = results.read_bytes()
    if data and not data.endswith(b"\n"):
        results.write_bytes(data[:data.rfind(b"\n") + 1])


def read_rows(out: Path) -> list[dict[str, Any]]:
    """Every complete row; a line cut short by a kill is skipped (it is judged again)."""
    rows = []
    try:
        lines = (out / RESULTS).read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def _append(out: Path, row: dict[str, Any]) -> None:
    with (out / RESULTS).open("a") as handle:
        handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _cache_dir() -> Path:
    from kernelevo.cache_dir import default_cache_dir

    return default_cache_dir()
