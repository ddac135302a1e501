"""Where a `kernelevo suite` run's rows spent their time, and how two runs' timings agree.

    python bench/suite_rows.py RESULTS.jsonl [--late 40]
    python bench/suite_rows.py RESULTS.jsonl --against OTHER.jsonl
    python bench/suite_rows.py RESULTS.jsonl --quiet

One file: rows by baseline source, what each row's oracle and worker held on
the GPU at their peaks against the lane's estimate (suite/footprint.py), the mean and max of every phase over the
last `--late` rows (the suite's steady state, past its first tasks), and how
many re-checks at other sizes were already in when their evaluation ended.
With `--against`: for the solutions both runs timed with measured baselines,
p10 / median / p90 of the ratio of their eager speedups and of their
candidate times (the run-to-run spread of the suite's timings). With
`--quiet`: what still ran while each row's calls were timed with the other
jobs stood still (evaluate/sandbox/quiet_load.py), beside the row's host probe.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def phases(rows: list[dict], late: int) -> dict:
    tail = rows[-late:]
    names = sorted({name for row in tail for name in row.get("phases_s", {})})
    waits = [row["phases_s"]["shape_variation"] for row in rows
             if "shape_variation" in row.get("phases_s", {})]
    return {
        "rows": len(rows),
        "baseline_source": dict(Counter(row.get("baseline_source") for row in rows)),
        "gpu_memory": memory(rows),
        "late_rows": len(tail),
        "late_wall_mean_s": round(statistics.mean(row["wall_s"] for row in tail), 2),
        "late_phase_mean_max_s": {
            name: (round(statistics.mean(row["phases_s"].get(name, 0.0) for row in tail), 2),
                   round(max(row["phases_s"].get(name, 0.0) for row in tail), 2))
            for name in names},
        "rechecks": len(waits),
        "rechecks_already_in": sum(1 for wait in waits if wait < 0.005),
    }


def memory(rows: list[dict], top: int = 5) -> dict:
    """What each row's processes held at their peaks, with its lane's CUDA contexts, against
    the lane's size (`lane_bytes`): the oracle's and worker's peaks, and the re-check's two
    where the row has them, plus a context for each of those processes. By where the size
    came from too (`lane_bytes_from`): the task's sizes (suite/footprint.py) or the peaks an
    earlier suite recorded (suite/lane_peaks.py).
    """
    from kernelevo.suite.footprint import lane_contexts

    seen = []
    for row in rows:
        peaks, size = row.get("gpu_peak_bytes") or {}, row.get("lane_bytes") or 0
        if peaks and size:
            contexts = lane_contexts(1, any(part.startswith("recheck") for part in peaks))
            seen.append(((sum(peaks.values()) + contexts) / size, row["task"], peaks, size,
                         row.get("lane_bytes_from") or "sizes"))
    if not seen:
        return {"rows_with_peaks": 0}
    by_source = {}
    for source in sorted({found[4] for found in seen}):
        ratios = [ratio for ratio, *_, where in seen if where == source]
        by_source[source] = {"rows": len(ratios), "held_over_size_p10_p50_p90": _quantiles(ratios),
                             "over_the_size": sum(1 for ratio in ratios if ratio > 1)}
    return {"rows_with_peaks": len(seen),
            "held_over_size_p10_p50_p90": _quantiles([found[0] for found in seen]),
            "over_the_size": sum(1 for found in seen if found[0] > 1), "by_source": by_source,
            "largest": [{"task": task, "ratio": round(ratio, 2), "from": where, "peaks_gib": {
                k: round(v / 2**30, 2) for k, v in peaks.items()},
                "size_gib": round(size / 2**30, 2)}
                for ratio, task, peaks, size, where in sorted(seen, reverse=True)[:top]]}


def _quantiles(values: list[float]) -> list[float]:
    values = sorted(values)
    return [round(values[int(share * (len(values) - 1))], 3) for share in (0.1, 0.5, 0.9)]


def agreement(first: list[dict], second: list[dict]) -> dict:
    other = {row["file"]: row for row in second}
    speedups, times, pairs = [], [], []
    for row in first:
        match = other.get(row["file"])
        if match is None or not row.get("candidate_ms") or not match.get("candidate_ms"):
            continue
        times.append(match["candidate_ms"] / row["candidate_ms"])
        pairs.append(row)
        a, b = (row.get("speedup") or {}).get("eager"), (match.get("speedup") or {}).get("eager")
        if a and b and row.get("baseline_source") == match.get("baseline_source") == "measured":
            speedups.append(b / a)
    short = [ratio for row, ratio in zip(pairs, times) if row["candidate_ms"] < SHORT_MS]
    return {"speedup_rows": len(speedups), "speedup_ratio_p10_p50_p90": _quantiles(speedups),
            "speedup_ratio_outside_0.8_1.25": _outside(speedups),
            "candidate_rows": len(times), "candidate_ms_ratio_p10_p50_p90": _quantiles(times),
            "candidate_ms_ratio_outside_0.8_1.25": _outside(times),
            f"candidate_rows_under_{SHORT_MS}_ms": len(short),
            f"candidate_ms_ratio_outside_0.8_1.25_under_{SHORT_MS}_ms": _outside(short)}


# Calls this short are mostly the host's launch work: the call measure (host
# time per call) of such a row moves with the load on the machine's CPUs.
SHORT_MS = 0.2


def quiet(rows: list[dict]) -> dict:
    """Busy cores off the timing cores (and the judge's own) while each row's calls were
    timed with the others stood still, over the rows that measured it, and their host
    probes: whether the machine's other work or the timing core's own speed moved."""
    measured = [(row["phases_s"], row) for row in rows
                if (row.get("phases_s") or {}).get("quiet")]
    if not measured:
        return {"rows": 0}
    busy = [p["quiet_busy_elsewhere"] / p["quiet"] for p, _ in measured]
    judge = [p["quiet_judge_cpu"] / p["quiet"] for p, _ in measured]
    probes = [float(row["host_probe_us"]) for _, row in measured if row.get("host_probe_us")]
    return {"rows": len(measured), "seconds": round(sum(p["quiet"] for p, _ in measured), 2),
            "busy_cores_p10_p50_p90": _quantiles(busy), "busy_cores_max": round(max(busy), 2),
            "judge_cores_p10_p50_p90": _quantiles(judge),
            "steal_s": round(sum(p.get("quiet_steal") or 0.0 for p, _ in measured), 3),
            "host_probe_us_p10_p50_p90": _quantiles(probes) if probes else None}


def _outside(ratios: list[float]) -> int:
    """How many of `ratios` say the two runs differ by more than a quarter."""
    return sum(1 for ratio in ratios if not 0.8 <= ratio <= 1.25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--late", type=int, default=40)
    parser.add_argument("--against", type=Path)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    rows = rows_of(args.results)
    if args.quiet:
        print(json.dumps(quiet(rows), indent=1))
        return
    print(json.dumps(phases(rows, args.late), indent=1))
    if args.against:
        print(json.dumps(agreement(rows, rows_of(args.against)), indent=1))


if __name__ == "__main__":
    main()
