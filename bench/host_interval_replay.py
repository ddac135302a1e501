"""A host-speed rule for the call interval, replayed on recorded agreement tables.

    python3 bench/host_interval_replay.py AGREEMENT.json ...

The judge widens a launch-bound pair's call interval by the host's whole
speed spread (host_speed.py). The rule tried here instead: the interval
holds what the pair reads on a host that much slower or faster, each
contestant's call time moving with the host's speed but never below its
gpu time (`rerun_range`), so two contestants bound by the host alike keep
their speedup. Each AGREEMENT.json is bench/speed_agreement.py's output of
one GPU run. Where a recorded interval was widened by the spread, its
rounds' own part is taken as the 5 % floor (on the call rows not so widened
in sessions 34 and 36 it was the floor on both sides on 34 of 37). Each call
row's interval is made again with the rule, from the row's host spread and
both contestants' call and gpu milliseconds (the gpu row of the same pair),
and scored as speed_agreement.py does: plain's median inside, the interval
no wider than plain's range plus 10 % of its median. Gpu rows are scored as
recorded. No GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from kernelevo.evaluate.child.timing import RANGE_FLOOR  # noqa: E402

WIDTH_SLACK = 0.10  # as bench/speed_agreement.py


def rerun_range(interval: list[float], calls_ms: tuple[float, float],
                devices_ms: tuple[float, float] | None, host_spread: float) -> list[float]:
    """`interval` of the speedup calls_ms[0] / calls_ms[1], widened to what the pair reads
    on a host `host_spread` slower or faster, each call time bounded below by its device
    time (`devices_ms`); without device times, `host_spread` either side (the judge's rule)."""
    if host_spread <= 0:
        return interval
    (base, own), point = calls_ms, calls_ms[0] / calls_ms[1]
    if devices_ms is None:
        moved = [point / (1 + host_spread), point * (1 + host_spread)]
    else:
        def at(factor: float) -> float:  # the speedup on a host `factor` as slow
            return max(devices_ms[0], base * factor) / max(devices_ms[1], own * factor)

        moved = [point * at(factor) / at(1.0) for factor in (1 / (1 + host_spread),
                                                              1 + host_spread)]
    return [min(interval[0], *moved), max(interval[1], *moved)]


def by_pair(path: Path) -> dict[str, dict[str, dict]]:
    """Task -> measure -> the table's row, for rows the judge timed."""
    pairs: dict[str, dict[str, dict]] = {}
    for row in json.loads(path.read_text())["rows"]:
        if "judge" in row and row.get("plain_runs"):
            pairs.setdefault(row["task"], {})[row["measure"]] = row
    return pairs


def spread_of(row: dict) -> float:
    said = str(row.get("host_spread") or "0").rstrip("%")
    return float(said) / 100 if said.replace(".", "", 1).isdigit() else 0.0


def was_widened(row: dict) -> bool:
    """Whether the recorded interval's low end is the host spread's (the rule before)."""
    spread, point = spread_of(row), row["judge"]
    return spread > RANGE_FLOOR and abs(row["interval"][0] - point / (1 + spread)) < 0.003


def replayed(row: dict, gpu: dict | None) -> list[float]:
    """The call row's interval under the rule."""
    point, interval = row["judge"], list(row["interval"])
    if was_widened(row):
        interval = [point / (1 + RANGE_FLOOR), point * (1 + RANGE_FLOOR)]
    devices = None if gpu is None else (gpu["eager_ms"], gpu["candidate_ms"])
    return rerun_range(interval, (row["eager_ms"], row["candidate_ms"]), devices,
                       spread_of(row))


def scored(row: dict, interval: list[float]) -> tuple[bool, bool]:
    low, high = interval
    median, (least, most) = row["plain_median"], row["plain_range"]
    return (low <= median <= high,
            high - low <= most - least + WIDTH_SLACK * median)


def main() -> None:
    paths = [Path(arg) for arg in sys.argv[1:]]
    if not paths:
        raise SystemExit(__doc__)
    print("| table | rows | inside, recorded | inside, rule | width ok, recorded | width ok, rule |")
    print("|---|---|---|---|---|---|")
    for path in paths:
        counts = [0, 0, 0, 0]
        rows = 0
        for measures in by_pair(path).values():
            for measure, row in measures.items():
                rows += 1
                before = scored(row, row["interval"])
                after = (scored(row, replayed(row, measures.get("gpu")))
                         if measure == "call" else before)
                for slot, ok in enumerate((before[0], after[0], before[1], after[1])):
                    counts[slot] += ok
        print(f"| {path.parent.parent.name} | {rows} | {counts[0]} | {counts[1]} | "
              f"{counts[2]} | {counts[3]} |")


if __name__ == "__main__":
    main()
