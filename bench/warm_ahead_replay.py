"""Which rows of a suite pass find their task warmed ahead, lanes sized as they were or as now.

    python bench/warm_ahead_replay.py RESULTS.jsonl [--lanes 6] [--gpu-gib 79] [--head-start-s 6]

A lane of `kernelevo suite` takes its next task ahead as it starts its
current task's last solution, and starts that task's session then, so the
next row finds its processes warm (suite/lanes.py `take_ahead`). It does so
only where the next task's lane size is admitted beside every size already
reserved on the GPU, the lanes' current tasks and their tasks taken ahead
(suite/schedule.py `MemoryBook`, `fits`: while the lanes hold no more than
they reserved, a task is admitted where the reservations and its size come
to no more than the GPU frees idle), and only while no other lane waits for
a task (`TaskQueue.take`: a lane without one goes first; at a suite's start,
the lanes waiting out the first lane's head start). Without one, the lane takes its next
task when its row ends, waiting for memory where none fits, and that task's
worker starts cold.

This script replays a pass's rows on its lanes with that rule: each row for
its recorded wall time, in the suite's order (tasks needing no build first,
then the smaller lane; suite/schedule.py `order_key`), the first lane at
once and the others after the first row or the head start. It counts the
rows that would have found their task taken ahead, with the lanes sized as
the pass sized them (`lane_bytes`) and as the suite sizes them now: a CUDA
context for each process the lane runs (suite/footprint.py `lane_contexts`:
the evaluation's two, the re-check's two where the row has their peaks)
where the pass counted six. Beside it, the rows the pass did find warm (its
worker asked for candidates the moment they came: `worker_start` under
0.05 s) say how close the replay comes. The rows' times are as recorded
(a row that found its task warm would have been shorter): a count of
admissions, not a forecast of the pass's seconds. Nothing runs on a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

GIB = float(1 << 30)
WARM_START_S = 0.05  # a worker that asked for candidates as they came: started ahead
CONTEXTS_BEFORE = 6  # every lane's size counted six contexts until session 39 (since, each
# row says how many: `lane_processes`)


class Row(NamedTuple):
    name: str
    seconds: float
    size: float  # GiB
    needs_build: bool
    warm: bool  # as recorded


class Lane:
    def __init__(self) -> None:
        self.busy_until: float | None = None
        self.size = 0.0  # the current task's reservation, GiB
        self.ahead: Row | None = None


def rows_of(results: list[dict], contexts: str) -> list[Row]:
    """The pass's rows in the suite's order, each lane sized `as_run` or `now`."""
    from kernelevo.suite.footprint import CONTEXT_BYTES, lane_contexts

    found = []
    for row in results:
        size = float(row.get("lane_bytes") or 0)
        if contexts == "now":  # the contexts the size counted: as the row says, else six
            counted = row.get("lane_processes") or CONTEXTS_BEFORE
            rechecked = any(part.startswith("recheck") for part in row.get("gpu_peak_bytes") or {})
            size += lane_contexts(1, rechecked) - counted * CONTEXT_BYTES
        phases = row.get("phases_s") or {}
        found.append(Row(f"{row['task']}#{row.get('sample')}", float(row["wall_s"]), size / GIB,
                         str(row.get("file", "")).startswith("cuda_"),
                         "worker_start" in phases and phases["worker_start"] < WARM_START_S))
    return sorted(found, key=lambda r: (r.needs_build, r.size))  # stable: the file's order next


def replay(rows: list[Row], lanes: int, gpu_gib: float, head_start_s: float) -> dict:
    """Rows that found their task taken ahead, and lane-seconds spent waiting for memory."""
    queue, state = list(rows), [Lane() for _ in range(lanes)]
    warm, cold, memory_wait, t = [], [], 0.0, 0.0
    waiting_since: dict[int, float] = {}
    unstarted = set(range(lanes))  # no task taken yet (nor found none left)

    def reserved() -> float:
        return sum(lane.size for lane in state) + sum(lane.ahead.size for lane in state
                                                      if lane.ahead is not None)

    def take(number: int | None = None) -> Row | None:
        """The first task that fits; taken ahead (by lane `number`), none while another
        lane has no task: it goes first (suite/schedule.py `TaskQueue.take`)."""
        if number is not None and (set(waiting_since) | unstarted) - {number}:
            return None
        held = reserved()
        for index, row in enumerate(queue):
            if held <= 0 or held + row.size <= gpu_gib:
                return queue.pop(index)
        return None

    def start(number: int, row: Row, ahead: bool) -> None:
        lane = state[number]
        unstarted.discard(number)
        lane.busy_until, lane.size = t + row.seconds, row.size
        (warm if ahead else cold).append(row)
        lane.ahead = take(number)  # as its (only) solution's row begins

    def fill() -> None:
        nonlocal memory_wait
        for number, lane in enumerate(state):
            if lane.busy_until is not None or (number and t < started_others):
                continue
            row = take() if queue else None
            if row is None and queue:
                waiting_since.setdefault(number, t)
                continue
            if number in waiting_since:  # a task fits now, or none is left to wait for
                memory_wait += t - waiting_since.pop(number)
            unstarted.discard(number)
            if row is not None:
                start(number, row, ahead=False)

    started_others = head_start_s  # the other lanes wait for the first row, at most this
    fill()
    if state[0].busy_until is not None:
        started_others = min(head_start_s, state[0].busy_until)
    while any(lane.busy_until is not None for lane in state) or queue:
        busy = [(lane.busy_until, n) for n, lane in enumerate(state) if lane.busy_until is not None]
        due = [when for when, _ in busy] + ([started_others] if t < started_others else [])
        if not due:  # nothing runs and nothing is due: fill() has started what it could
            break
        t = min(due)
        for when, number in busy:
            if when == t:
                lane = state[number]
                lane.busy_until, lane.size = None, 0.0
                if lane.ahead is not None:
                    row, lane.ahead = lane.ahead, None
                    start(number, row, ahead=True)
        fill()
    return {"rows": len(rows), "warm_ahead": len(warm), "cold": len(cold),
            "memory_wait_lane_s": round(memory_wait, 1),
            "warm_ahead_as_recorded": sum(1 for row in rows if row.warm),
            "both": sum(1 for row in warm if row.warm)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+", help="a suite's results.jsonl")
    parser.add_argument("--lanes", type=int, default=6)
    parser.add_argument("--gpu-gib", type=float, default=79.0,
                        help="what the GPU frees idle (an H100: 79)")
    parser.add_argument("--head-start-s", type=float, default=6.0)
    args = parser.parse_args()
    found = {}
    for path in args.results:
        results = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        results = [row for row in results if row.get("lane_bytes") and row.get("wall_s")]
        found[str(path)] = {contexts: replay(rows_of(results, contexts), args.lanes, args.gpu_gib,
                                             args.head_start_s)
                            for contexts in ("as_run", "now")}
        for contexts, outcome in found[str(path)].items():
            print(f"{path} ({contexts}): {outcome['warm_ahead']} of {outcome['rows']} rows warmed "
                  f"ahead (recorded: {outcome['warm_ahead_as_recorded']}, both "
                  f"{outcome['both']}); lanes waited {outcome['memory_wait_lane_s']} s for memory")
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
