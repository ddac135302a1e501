"""A suite pass's tasks laid out again on its lanes in other orders, lanes sized as the suite sizes them.

    python bench/order_replay.py RESULTS.jsonl [RESULTS.jsonl ...] --kb .kb [--lanes 6] [--gpu-gib 79]

A suite hands its tasks out quickest first (suite/schedule.py `order_key`:
those needing no CUDA build first, then the smaller lane), so the largest
tasks come last, when few fit on the GPU at once and the other lanes idle.
This script takes each row's time on its lane (its wall time, less any wait
to be judged alone) and its lane's size as the suite now gives it from the
task's sizes (suite/footprint.py, terms measured as `lane_memory_fit.py`
measures them), and lays the tasks out again by list scheduling: whenever a
lane is free, the first task in the order that fits beside the sizes of the
lanes running (a lane alone always starts). It prints when the last lane
ends for each order: the suite's own; largest first; the lanes' first tasks
the smallest, then largest first; and the longest first (the rows' own
times, which no suite knows ahead: a bound). Tasks needing a build keep
their place after the others in every order but the last, as their builds
run ahead in that order. The times are what each row took beside the pass's
own neighbours: a simulation, not a run. Nothing runs on a GPU.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

GIB = float(1 << 30)
CANDIDATES = Path(__file__).resolve().parent / "kernelbench" / "candidates"

Task = tuple[str, float, float, bool]  # name, seconds on its lane, lane GiB, needs a build


def lay_out(tasks: list[Task], lanes: int, gpu_gib: float) -> float:
    """When the last lane ends, the tasks handed out in this order to `lanes` lanes."""
    pending, running, used, t = list(tasks), [], 0.0, 0.0
    while pending or running:
        while len(running) < lanes and pending:
            index = next((i for i, (_, _, size, _) in enumerate(pending)
                          if not running or used + size <= gpu_gib), None)
            if index is None:
                break
            _, seconds, size, _ = pending.pop(index)
            heapq.heappush(running, (t + seconds, size))
            used += size
        t, size = heapq.heappop(running)
        used -= size
    return round(t, 1)


def orders(lanes: int) -> dict[str, Callable[[list[Task]], list[Task]]]:
    def builds_last(key: Callable[[Task], Any]) -> Callable[[list[Task]], list[Task]]:
        return lambda tasks: sorted(tasks, key=lambda task: (task[3], key(task)))

    def smallest_then_largest(tasks: list[Task]) -> list[Task]:
        smallest = sorted((t for t in tasks if not t[3]), key=lambda t: t[2])
        rest = sorted(smallest[lanes:], key=lambda t: -t[2])
        return smallest[:lanes] + rest + [t for t in tasks if t[3]]

    return {"the suite's (smallest first)": builds_last(lambda t: t[2]),
            "largest first": builds_last(lambda t: -t[2]),
            "the lanes' first tasks smallest, then largest first": smallest_then_largest,
            "longest first (the rows' own times: a bound)":
                lambda tasks: sorted(tasks, key=lambda t: -t[1])}


def tasks_of(rows: list[dict], size_of: Callable[[str], float]) -> list[Task]:
    found = []
    for row in rows:
        if row.get("wall_s") is None:
            continue
        seconds = max(0.1, float(row["wall_s"]) - float(row.get("alone_wait_s") or 0.0))
        candidate = CANDIDATES / str(row.get("file", "")).split("__", 1)[-1]
        build = candidate.name.startswith("cuda_") or (
            candidate.exists() and "load_inline" in candidate.read_text())
        found.append((row["task"], seconds, size_of(row["task"]), build))
    return found


def main() -> None:
    from lane_memory_fit import corpus_arguments, sizes, suite_size, task_paths

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    corpus_arguments(parser)
    parser.add_argument("--lanes", type=int, default=6)
    args = parser.parse_args()
    by_task = task_paths(args)
    cache: dict[str, float] = {}

    def size_of(task: str) -> float:
        if task not in cache:
            cache[task] = suite_size(sizes(by_task[task])) if task in by_task else 0.0
        return cache[task]

    result: dict[str, Any] = {}
    for path in args.results:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        tasks = tasks_of(rows, size_of)
        ends = {name: lay_out(order(tasks), args.lanes, args.gpu_gib)
                for name, order in orders(args.lanes).items()}
        result[str(path)] = {"rows": len(tasks), "builds": sum(1 for t in tasks if t[3]),
                             "recorded_end_s": max((r.get("ended_s") or 0 for r in rows),
                                                   default=0), "ends_s": ends}
        print(f"{path}: {len(tasks)} rows, the pass ended at "
              f"{result[str(path)]['recorded_end_s']} s; laid out again on {args.lanes} lanes "
              f"and {args.gpu_gib:g} GiB:")
        for name, end in ends.items():
            print(f"  {name}: {end} s")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
