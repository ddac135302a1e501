"""The speedup interval's floor replayed on recorded agreement tables.

    python3 bench/floor_replay.py [--floors 0,0.03,0.05,0.07] AGREEMENT.json ...

Each AGREEMENT.json is bench/speed_agreement.py's output of one GPU run (the
judge's speedups and intervals, and plain_timing.py's runs of the same pairs).
For every floor it widens each recorded interval to at least that fraction
either side of the judge's speedup (as `timing.speedup_range` does with
RANGE_FLOOR) and scores it as speed_agreement.py does: the plain runs' median
inside, and the interval no wider than their range plus 10 % of their median.
It also prints how far plain's own fresh-process runs of one pair spread
(max / min), the between-process move a rerun shows. No GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

WIDTH_SLACK = 0.10  # as bench/speed_agreement.py


def rows_of(paths: list[Path]) -> list[dict]:
    rows = []
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            if "judge" in row and row.get("plain_runs"):
                rows.append(row)
    return rows


def score(rows: list[dict], floor: float) -> tuple[int, int, int]:
    """(rows, plain median inside, width ok) with every interval at least `floor` either side."""
    inside = width_ok = 0
    for row in rows:
        point, (low, high) = row["judge"], row["interval"]
        low, high = min(low, point / (1 + floor)), max(high, point * (1 + floor))
        median = row["plain_median"]
        inside += low <= median <= high
        spread = row["plain_range"][1] - row["plain_range"][0]
        width_ok += high - low <= spread + WIDTH_SLACK * median
    return len(rows), inside, width_ok


def quantile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[round(share * (len(ordered) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="+", type=Path)
    parser.add_argument("--floors", default="0,0.03,0.05,0.07,0.10")
    args = parser.parse_args()
    rows = rows_of(args.tables)
    if not rows:
        raise SystemExit("no scored rows in those tables")
    moves = [max(r["plain_runs"]) / min(r["plain_runs"]) for r in rows
             if len(r["plain_runs"]) >= 2]
    if moves:
        print(f"plain's own runs of one pair, max / min over {len(moves)} rows: p50 "
              f"{quantile(moves, 0.5):.3f}, p75 {quantile(moves, 0.75):.3f}, "
              f"p90 {quantile(moves, 0.9):.3f}")
    print("| floor | measure | rows | plain median inside | width ok |")
    print("|---|---|---|---|---|")
    for floor in (float(x) for x in args.floors.split(",")):
        for measure in sorted({r["measure"] for r in rows}):
            count, inside, width_ok = score([r for r in rows if r["measure"] == measure], floor)
            print(f"| {floor:.0%} | {measure} | {count} | {inside} ({inside / count:.0%}) | "
                  f"{width_ok} ({width_ok / count:.0%}) |")
    medians = [statistics.median(r["plain_runs"]) for r in rows]
    print(f"{len(rows)} rows from {len(args.tables)} tables; plain medians "
          f"{min(medians):.2f}-{max(medians):.2f}x")


if __name__ == "__main__":
    main()
