"""A GPU's first lane starts alone: its other lanes wait for the suite's first row, at most
the head start."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from kernelevo.config import EvalConfig
from kernelevo.suite.alone import GpuRoom
from kernelevo.suite.lane_judge import LaneContext
from kernelevo.suite.lanes import _Lanes
from kernelevo.suite.schedule import PlannedTask
from kernelevo.suite.tasks import Solution, SuiteTask
from kernelevo.suite.time_spent import LaneRecord, LaneStats, time_spent


class _Tasks:
    """Hands out one task per lane that asks, and notes when each lane asked."""

    def __init__(self, count: int) -> None:
        self.left = [PlannedTask(SuiteTask(f"t{n}", Path(f"t{n}.py")),
                                 [Solution(Path(f"t{n}_s.py"), 0)], n, False,
                                 error="cannot load")  # rows without a judge
                     for n in range(count)]
        self.asked: dict[int, float] = {}
        self.lock = threading.Lock()

    def take(self, admit: Any, wait: bool, stopped: Any, lane: int = 0) -> tuple:
        with self.lock:
            self.asked.setdefault(lane, time.monotonic())
            return (self.left.pop(0) if self.left and wait else None), 0, 0.0


def _run(head_start_s: float, first_row_after_s: float) -> tuple[dict[int, float], LaneRecord]:
    tasks, record = _Tasks(3), LaneRecord()

    def make_row(task: SuiteTask, solution: Solution, reason: str, **fields: Any) -> dict:
        if task.key == "t0":  # the first lane's first row comes late
            time.sleep(first_row_after_s)
        return {"task": task.key, "sample": solution.sample, "reason": reason}

    lanes = _Lanes(tasks, {0: GpuRoom()}, {}, None, record, False,  # type: ignore[arg-type]
                   head_start_s)
    room = lanes.rooms[0]
    for number in range(3):
        lanes.add(LaneStats(number, 0), LaneContext(EvalConfig(), None, None, 0, make_row,
                                                    room, number))
    started = time.monotonic()
    lanes.launch()
    rows = list(lanes.rows())
    assert sorted(row["task"] for row in rows) == ["t0", "t1", "t2"]
    # each row says when it ended: t0's came after its lane's late first row, the others
    # once their lanes began
    ended = {row["task"]: row["ended_s"] for row in rows}
    assert ended["t0"] >= first_row_after_s and all(0 <= at < 5 for at in ended.values())
    return {lane: at - started for lane, at in tasks.asked.items()}, record


def test_the_other_lanes_start_once_the_first_row_is_in() -> None:
    asked, record = _run(head_start_s=5.0, first_row_after_s=0.6)
    assert asked[0] < 0.3
    assert 0.5 < asked[1] < 2.5 and 0.5 < asked[2] < 2.5
    waits = [lane.head_start_wait_s for lane in record.lanes]
    assert waits[0] == 0.0 and all(0.5 < wait < 2.5 for wait in waits[1:])
    spent = time_spent([], record, 1.0)
    assert spent["lane_waits_s"]["head start of the first lane"] > 1.0
    assert [lane["head_start_wait_s"] > 0 for lane in spent["per_lane"]] == [False, True, True]


def test_a_first_row_late_past_the_head_start_holds_the_others_no_longer() -> None:
    asked, _ = _run(head_start_s=0.3, first_row_after_s=1.5)
    assert 0.25 < asked[1] < 1.2 and 0.25 < asked[2] < 1.2


def test_no_head_start_starts_every_lane_at_once() -> None:
    asked, record = _run(head_start_s=0.0, first_row_after_s=0.6)
    assert all(at < 0.3 for at in asked.values())
    assert all(lane.head_start_wait_s == 0.0 for lane in record.lanes)


def test_a_negative_head_start_is_refused() -> None:
    import pytest

    from kernelevo.errors import TaskError
    from kernelevo.suite.runner import HEAD_START_S, SuitePlan

    assert SuitePlan(("t.py",), None, Path("out")).head_start_s == HEAD_START_S
    with pytest.raises(TaskError, match="head start"):
        SuitePlan(("t.py",), None, Path("out"), head_start_s=-1.0)
