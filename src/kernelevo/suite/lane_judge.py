"""One task's solutions judged in turn on a lane, each verdict a row of the suite.

The lane's judge keeps the next session of its task started (standby), so
a task's later solutions find it warm. Memory that runs out while anything
else holds memory on the GPU (another lane, this lane's standby or its next
task warmed ahead) is the lanes' doing, not the solution's: the solution is
judged again alone on the GPU (suite/alone.py), and only then is the row
`out_of_memory`, naming whose process ran out and the size it asked for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.errors import CandidateError, KernelEvoError, TaskError
from kernelevo.evaluate.parent.baseline_store import BaselineStore
from kernelevo.suite.alone import GpuRoom, OutOfMemory, out_of_memory_in, row_message, \
    worth_running_alone
from kernelevo.suite.metrics import BASELINES
from kernelevo.suite.tasks import Solution, SuiteTask

Row = dict[str, Any]
MakeRow = Callable[..., Row]
LOG_TAIL_CHARS = 2000  # of a crashed process's output, kept in its row


@dataclass(frozen=True)
class LaneContext:
    """What every task judged on one lane shares: the settings, the lane and its GPU."""

    config: EvalConfig
    store: BaselineStore | None
    gpu: str | None  # the GPU's model, for rows
    gpu_index: int | None
    make_row: MakeRow
    room: GpuRoom
    lane: int  # the lane's number in the suite
    total_bytes: int | None = None  # the GPU's memory, where known


class TaskLane:
    """Judges one task's solutions in turn on one GPU, keeping the next session warm."""

    def __init__(self, task: SuiteTask, loaded: Any, context: LaneContext,
                 extra: dict[str, Any]) -> None:
        self.task, self.loaded, self.context, self.extra = task, loaded, context, extra
        self.make_row = context.make_row
        self.measure = context.config.timing.measure
        self.wanted = tuple(b for b in BASELINES if b in context.config.timing.baselines)
        self.judge = self._judge()
        context.room.add_judge(self.judge)

    def _judge(self) -> Any:
        from kernelevo.evaluate.parent.judge import Judge

        return Judge(self.loaded, self.context.config, gpu_index=self.context.gpu_index,
                     standby=True, baseline_store=self.context.store)

    def judge_one(self, solution: Solution, waited_s: float, more: bool = True) -> Row:
        """One solution's row; `more` when another solution of the task follows it.

        Only then does the judge keep a next session warm (standby): for the
        last one, that session's oracle, worker and baseline warm-up would be
        started only to be killed, taking cores and the GPU from other lanes.
        """
        started = time.perf_counter()
        try:
            candidate = load_candidate(solution.path)
        except KernelEvoError as exc:
            return self.make_row(self.task, solution, "bad_candidate", message=str(exc),
                                 **self.extra)
        outcome, memory, alone, alone_wait_s = self._judged(candidate, more)
        waits: dict[str, Any] = {"build_wait_s": round(waited_s, 2),
                                 "wall_s": round(time.perf_counter() - started + waited_s, 2)}
        if alone_wait_s >= 0.005:  # for its own run alone, or another lane's
            waits["alone_wait_s"] = round(alone_wait_s, 2)
        if alone:
            waits["judged_alone"] = True
        if isinstance(outcome, KernelEvoError):
            reason = "out_of_memory" if memory else _blamed(outcome)
            row = self.make_row(self.task, solution, reason, message=str(outcome)[:500],
                                **waits, **self.extra)
        else:
            row = self._verdict_row(solution, outcome, waits)
        if memory:
            row.update(message=row_message(memory, alone)[:500],
                       out_of_memory=_memory_fields(memory, alone))
        return row

    def _judged(self, candidate: Any,
                more: bool) -> tuple[Any, OutOfMemory | None, bool, float]:
        """(the outcome, the memory that ran out in it, whether it was judged again
        alone, the seconds waited for runs alone: another lane's, then its own)."""
        room, lane = self.context.room, self.context.lane
        with room.inside(lane) as entry:
            outcome = self._evaluate(candidate, more)
            memory = out_of_memory_in(outcome)
            company = more or room.company(lane, self.judge)
            if not (memory and worth_running_alone(memory, company, self.context.total_bytes)):
                return outcome, memory, False, entry.waited_s
            with room.alone(entry) as waited_s:
                outcome = self._evaluate(candidate, more=False)
            return outcome, out_of_memory_in(outcome), True, entry.waited_s + waited_s

    def _evaluate(self, candidate: Any, more: bool) -> Any:
        """The judge's verdict, or the error of a reference that could not be computed."""
        self.judge.standby = more
        try:
            return self.judge.evaluate(candidate)
        except KernelEvoError as exc:
            return exc

    def _verdict_row(self, solution: Solution, verdict: Any, waits: dict[str, Any]) -> Row:
        from kernelevo.evaluate.verdict import speedup

        own = verdict.measures.get(self.measure, {}).get("candidate")
        # A CPU run, or a candidate that never reached timing, has no baselines.
        baselines = {n: s for n, s in verdict.measures.get(self.measure, {}).items()
                     if n != "candidate"}
        how = verdict.environment.get("baselines", "")
        drift = verdict.environment.get("baseline_drift")  # stored times the probe found off
        source = "none" if not baselines else "stored" if how.startswith("stored") \
            else "drifted" if drift else "measured"
        gains = {b: speedup(baselines.get(b), own) if own else None for b in self.wanted}
        return self.make_row(
            self.task, solution, verdict.reason, status=verdict.status,
            passed_kernel=verdict.passed_kernel, message=verdict.message[:500],
            measure=verdict.timing_measure or None, speedup=gains,
            candidate_ms=own.median_ms if own else None,
            baseline_ms={n: s.median_ms for n, s in baselines.items()},
            baseline_source=source, **({"baseline_drift": drift} if drift else {}),
            flags=list(verdict.flags),
            timed_under=verdict.environment.get("timed_under"),
            host_speed_spread=verdict.environment.get("host_speed_spread"),
            host_probe_us=verdict.environment.get("host_probe_us"),
            timing_core=verdict.environment.get("timing_core"), **waits,
            phases_s={k: round(v, 2) for k, v in verdict.phases_s.items()},
            measures=_by_measure(verdict),
            # what the oracle and the worker held, against the lane's estimate (lane_bytes)
            **({"gpu_peak_bytes": dict(verdict.gpu_peak_bytes)} if verdict.gpu_peak_bytes else {}),
            # a process that crashed: the end of its output, to tell why from the rows alone
            **({"logs": verdict.logs[-LOG_TAIL_CHARS:]}
               if verdict.status == "crashed" and verdict.logs else {}),
            **self.extra)

    def close(self) -> None:
        self.context.room.remove_judge(self.judge)
        self.judge.close()


def _blamed(error: KernelEvoError) -> str:
    """The reason of a row the judge raised for: the task's (its reference failed), the
    candidate's, or the judge's own (a setting or the machine)."""
    if isinstance(error, TaskError):
        return "task_error"
    return "bad_candidate" if isinstance(error, CandidateError) else "judge_error"


def _memory_fields(memory: OutOfMemory, alone: bool) -> dict[str, Any]:
    return {"whose": memory.whose, "asked": memory.asked, "judged_alone": alone}


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
