"""The judge's times against independent ones, from a kernelbench_batch run's raw rows.

`bench/kernelbench_batch.py --phases judge timers` writes judge.jsonl (the
verdicts' medians) and timers.jsonl (do_bench, a graph replay, call loops,
the profiler, each in a plain process); its summary is only written when
both phases finish. This reads the rows a run cut short left too: per pair
(contestant, our measure, the independent measure), how many problems agree
within 5 % and 10 %, the median distance, and the rows outside 10 %.

    python bench/agreement_rows.py DIR   # DIR holds judge.jsonl and timers.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PAIRS = [("candidate", "gpu", "do_bench"), ("candidate", "gpu", "graph"),
         ("eager", "gpu", "do_bench"), ("eager", "gpu", "graph"),
         ("candidate", "call", "loop"), ("eager", "call", "loop"),
         ("candidate", "call", "loop_gc"), ("eager", "call", "loop_gc")]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    folder = Path(sys.argv[1])
    judged = {row["file"]: row for row in rows(folder / "judge.jsonl")}
    timers = rows(folder / "timers.jsonl")
    summary = {}
    for who, ours, theirs in PAIRS:
        ratios = []
        for timer in timers:
            measures = (judged.get(timer["file"]) or {}).get("measures") or {}
            mine = measures.get(ours, {}).get(who, {}).get("median_ms")
            other = timer.get(who, {}).get(theirs)
            if mine and other:
                ratios.append((mine / other, timer["file"].split("__")[0]))
        if not ratios:
            continue
        off = [abs(r - 1) for r, _ in ratios]
        summary[f"{who} {ours} / {theirs}"] = {
            "rows": len(ratios), "within_5pct": sum(o <= 0.05 for o in off),
            "within_10pct": sum(o <= 0.10 for o in off),
            "median_off_pct": round(100 * statistics.median(off), 2),
            "outside_10pct": {name: round(r, 3) for r, name in ratios if abs(r - 1) > 0.10}}
    sources = [row.get("baselines") for row in judged.values() if row.get("measures")]
    summary["verdicts_right"] = f"{sum(bool(r.get('right')) for r in judged.values())} of {len(judged)}"
    summary["baselines"] = {str(s): sources.count(s) for s in sorted(set(map(str, sources)))}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
