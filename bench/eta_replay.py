"""The suite's time-left estimate replayed on a recorded pass, against the time truly left.

    python3 bench/eta_replay.py RUN_DIR [RUN_DIR ...]

RUN_DIR holds one `kernelevo suite` pass as bench/gpu_next.sh keeps it:
`results.jsonl` (each row's lane and wall time, in the order rows finished)
and `suite.json` (its `time_spent`: each lane's head start). Rows that say
when they ended (`ended_s`, since the suite began) are placed there; older
ones are placed on their lane's timeline: each lane's rows ran one after
another, so a row ended at its lane's head start plus the wall times of its
lane's rows up to it. That timeline is fed, row by row, to
the suite's own estimator (kernelevo.suite.eta.Eta), and each figure it
gives is set against the time from that row to the last. A pass cut by its
time limit is replayed as if its finished rows were all it had. No GPU: it
reads what a device call recorded.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from kernelevo.suite.eta import Eta  # noqa: E402

MARKS = (0.1, 0.25, 0.5, 0.75, 0.9)  # shares of the rows done at which a figure is shown


def timeline(run: Path) -> tuple[list[dict], int]:
    """The pass's rows with the time each ended, in that order; the lanes."""
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line]
    spent = json.loads((run / "suite.json").read_text())["time_spent"]
    clock = {lane["lane"]: lane["head_start_wait_s"] for lane in spent["per_lane"]}
    if all("ended_s" in row for row in rows):  # recorded: nothing to rebuild
        return sorted(rows, key=lambda row: row["ended_s"]), len(clock)
    for row in rows:
        clock[row["lane"]] = clock.get(row["lane"], 0.0) + row["wall_s"]
        row["ended_s"] = clock[row["lane"]]
    return sorted(rows, key=lambda row: row["ended_s"]), len(clock)


def replay(run: Path) -> dict:
    rows, lanes = timeline(run)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["task"]] = counts.get(row["task"], 0) + 1
    eta, last = Eta(counts, lanes), rows[-1]["ended_s"]
    points = []
    for done, row in enumerate(rows[:-1], start=1):
        eta.finished(row)
        seconds = eta.seconds_left()
        if seconds is not None:
            points.append({"done": done / len(rows), "said_s": seconds,
                           "left_s": last - row["ended_s"], "text": eta.text()})
    under = sum(p["said_s"] <= p["left_s"] for p in points)
    floors = [p for p in points if p["text"].startswith("at least")]
    return {"run": str(run), "rows": len(rows), "lanes": lanes, "points": points,
            "at_or_under": under / len(points),
            "floor_said": len(floors), "floor_held": sum(p["said_s"] <= p["left_s"] for p in floors),
            "median_ratio": statistics.median(p["said_s"] / p["left_s"] for p in points
                                              if p["left_s"] > 0),
            "mean_abs_log": statistics.mean(abs(math.log(max(p["said_s"], 1) / max(p["left_s"], 1)))
                                            for p in points)}


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print("| pass | rows, lanes | said / truly left at " + ", ".join(f"{m:.0%}" for m in MARKS)
          + " of the rows | figures at or under the truth | median said/left | 'at least' held |")
    print("|---|---|---|---|---|---|")
    for run in map(Path, sys.argv[1:]):
        result = replay(run)
        shown = []
        for mark in MARKS:
            point = next((p for p in result["points"] if p["done"] >= mark), None)
            shown.append(f"{point['said_s']:.0f}/{point['left_s']:.0f} s" if point else "-")
        print(f"| {run.parent.name}/{run.name} | {result['rows']}, {result['lanes']} | {', '.join(shown)} | "
              f"{result['at_or_under']:.0%} | {result['median_ratio']:.2f} | "
              f"{result['floor_held']}/{result['floor_said']} |")


if __name__ == "__main__":
    main()
