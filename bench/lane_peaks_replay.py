"""A second suite pass replayed with its lanes sized from the first pass's GPU peaks.

    python3 bench/lane_peaks_replay.py FIRST/results.jsonl SECOND/results.jsonl [--gpu-gib 79]

suite/lane_peaks.py sizes a task's lane from the largest peaks its passing
rows recorded in an earlier suite on the same GPU model: the oracle's and
the worker's, the re-check's two, and the lane's six CUDA contexts. This
script takes each task's peaks from FIRST's passing rows as the suite would
have stored them, lays SECOND's rows on their recorded spans (a row from its
end less its wall time to its end), and prints, for the sizes with no margin
and with 15 % more, the most GiB the rows judged at once would have asked
for and the seconds that sum stood above `--gpu-gib`: the seconds in which
the suite would have held a task back for room. Beside them, the sizes
SECOND's rows had (`lane_bytes`) and the rows that ran out of memory and
were judged again alone, with when they started. No GPU: it reads rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from kernelevo.suite.footprint import CONTEXT_BYTES, LANE_PROCESSES  # noqa: E402
from kernelevo.suite.lane_peaks import RECHECK_PARTS, SESSION_PARTS  # noqa: E402

GIB = float(1 << 30)
STEP_S = 0.5


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def recorded_peaks(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Each task's largest peak per process over its passing rows, as the store keeps them."""
    peaks: dict[str, dict[str, int]] = {}
    for row in rows:
        found = row.get("gpu_peak_bytes") or {}
        if row.get("reason") != "passed" or not found:
            continue
        entry = peaks.setdefault(row["task"], {})
        for part in SESSION_PARTS + RECHECK_PARTS:
            if found.get(part):
                entry[part] = max(entry.get(part, 0), int(found[part]))
    return peaks


def sized(entry: dict[str, int], margin: float) -> float:
    data = sum(entry.get(part, 0) for part in SESSION_PARTS + RECHECK_PARTS)
    return LANE_PROCESSES * CONTEXT_BYTES + margin * data


def above(spans: list[tuple[float, float, float]],
          limit_bytes: float) -> tuple[float, float, list[list[float]]]:
    """(the most bytes asked for at once, the seconds the sum stood above `limit_bytes`,
    those stretches as [from, to] seconds)."""
    end = max((stop for _, stop, _ in spans), default=0.0)
    most, seconds, at = 0.0, 0.0, 0.0
    stretches: list[list[float]] = []
    while at <= end:
        total = sum(size for start, stop, size in spans if start <= at < stop)
        most = max(most, total)
        if total > limit_bytes:
            seconds += STEP_S
            if stretches and stretches[-1][1] == at:
                stretches[-1][1] = at + STEP_S
            else:
                stretches.append([at, at + STEP_S])
        at += STEP_S
    return most, seconds, stretches


def replay(first: list[dict[str, Any]], second: list[dict[str, Any]],
           gpu_gib: float) -> dict[str, Any]:
    peaks = recorded_peaks(first)
    limit = gpu_gib * GIB

    def spans(size_of: Any) -> list[tuple[float, float, float]]:
        return [(row["ended_s"] - row["wall_s"], row["ended_s"], size_of(row))
                for row in second if row.get("ended_s") is not None and row.get("wall_s")]

    result: dict[str, Any] = {"rows": len(second), "tasks_with_peaks": len(peaks)}
    for name, margin in (("peaks", 1.0), ("peaks_plus_15_percent", 1.15)):
        most, seconds, stretches = above(
            spans(lambda row: sized(peaks[row["task"]], margin) if row["task"] in peaks
                  else row.get("lane_bytes") or 0), limit)
        result[name] = {"most_gib": round(most / GIB, 1), "seconds_above": seconds,
                        "stretches_above_s": stretches}
    most, seconds, stretches = above(spans(lambda row: row.get("lane_bytes") or 0), limit)
    result["recorded_lane_bytes"] = {"most_gib": round(most / GIB, 1), "seconds_above": seconds,
                                     "stretches_above_s": stretches}
    result["judged_alone"] = [{"task": row["task"],
                               "started_s": round(row["ended_s"] - row["wall_s"], 1)}
                              for row in second if row.get("judged_alone")]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--gpu-gib", type=float, default=79.0)
    args = parser.parse_args()
    result = replay(read_rows(args.first), read_rows(args.second), args.gpu_gib)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
