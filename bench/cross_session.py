"""The same pairs judged on different machines: how far the judge's speedups move, and plain's.

    python3 bench/cross_session.py AGREEMENT.json AGREEMENT.json [AGREEMENT.json ...]

Each AGREEMENT.json is bench/speed_agreement.py's output of one GPU run (a
fresh machine each, in practice). For every (task, measure) row present in
all of them, it takes the judge's speedup and plain's median from each run
and prints, by measure:

- the spread of the judge's speedups across the runs (largest over smallest,
  less 1), and the spread of plain's medians, at the median and the 90th
  percentile of the rows;
- how often one run's judge speedup lies inside another run's interval (every
  ordered pair of runs): what a user who judges again on another machine can
  expect of the interval the first verdict printed.

Rows a run has no figures for (an untimed verdict) are left out. No GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

Key = tuple[str, str]


def load_rows(path: Path) -> dict[Key, dict[str, Any]]:
    """The rows of one agreement table that have a judge interval and plain runs."""
    table = json.loads(path.read_text())
    return {(r["task"], r["measure"]): r for r in table["rows"]
            if r.get("inside") is not None and r.get("interval")}


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1.0


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def compare(tables: list[dict[Key, dict[str, Any]]]) -> dict[str, Any]:
    """Spreads and cross-run interval hits over the rows every table has."""
    common = sorted(set.intersection(*(set(t) for t in tables)))
    summary: dict[str, Any] = {"runs": len(tables), "rows": len(common), "by_measure": {}}
    for measure in sorted({m for _, m in common}):
        keys = [k for k in common if k[1] == measure]
        judge = [spread([t[k]["judge"] for t in tables]) for k in keys]
        plain = [spread([t[k]["plain_median"] for t in tables]) for k in keys]
        hits = pairs = 0
        for key in keys:
            for a, first in enumerate(tables):
                for b, second in enumerate(tables):
                    if a != b:
                        low, high = second[key]["interval"]
                        hits += low <= first[key]["judge"] <= high
                        pairs += 1
        worst = max(keys, key=lambda k: spread([t[k]["judge"] for t in tables]))
        summary["by_measure"][measure] = {
            "rows": len(keys),
            "judge_spread_p50_p90": [round(statistics.median(judge), 4),
                                     round(percentile(judge, 0.9), 4)],
            "plain_spread_p50_p90": [round(statistics.median(plain), 4),
                                     round(percentile(plain, 0.9), 4)],
            "inside_another_runs_interval": [hits, pairs],
            "judge_widest": {"task": worst[0],
                             "speedups": [round(t[worst]["judge"], 3) for t in tables]}}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="+", type=Path)
    args = parser.parse_args()
    if len(args.tables) < 2:
        parser.error("give two agreement tables or more")
    summary = compare([load_rows(path) for path in args.tables])
    print(f"{summary['rows']} rows in all {summary['runs']} runs")
    print("| measure | rows | judge's spread, p50 / p90 | plain's medians' spread, p50 / p90 "
          "| judge inside another run's interval | judge's widest |")
    print("|---|---|---|---|---|---|")
    for measure, m in summary["by_measure"].items():
        hits, pairs = m["inside_another_runs_interval"]
        widest = m["judge_widest"]
        print(f"| {measure} | {m['rows']} | {m['judge_spread_p50_p90'][0]:.1%} / "
              f"{m['judge_spread_p50_p90'][1]:.1%} | {m['plain_spread_p50_p90'][0]:.1%} / "
              f"{m['plain_spread_p50_p90'][1]:.1%} | {hits}/{pairs} | {widest['task']} "
              f"{widest['speedups']} |")


if __name__ == "__main__":
    main()
