"""Whether a busy CPU moves the call measure of short candidates (GPU machine).

The suite's times of calls under 0.2 ms did not repeat between runs (26 of
84 rows more than 25 % apart, bench/RESULTS.md, session 15), with its machine
at a load of 11-16 on 16 cores. This judges the honest Triton candidates of
short level-1 problems in one process, in rounds: the machine quiet, then
with one busy process per core beside it at nice 0 (as a suite's lanes and
builds ahead load it), then the same at nice 10, then quiet again. Per
candidate: the call-time medians (candidate and eager) of every round and
their ratio to the first quiet round.

    KERNELEVO_CACHE_DIR=/tmp/ke-cache PYTHONPATH=src python bench/call_time_under_load.py \\
        --kb .kb --out DIR [--only 12 24 37 49 53] [--rounds quiet busy0 busy10 quiet]

DIR/call_time_under_load.jsonl gets a line per judged candidate and round
(a run cut short keeps what finished); DIR/call_time_under_load.json the
summary, printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from kernelbench_batch import CANDIDATES, load_entries, prepare  # noqa: E402

# Level-1 problems whose honest candidate took under 0.2 ms a call in the
# suite and moved by more than a quarter between two runs.
SHORT = ["12", "24", "37", "49", "53"]
BUSY = "while True:\n    pass\n"


class Busy:
    """One busy process per core at a given niceness, for the length of a `with`."""

    def __init__(self, nice: int | None, cores: int) -> None:
        self.nice, self.cores = nice, cores
        self.children: list[subprocess.Popen] = []

    def __enter__(self) -> "Busy":
        if self.nice is not None:
            nice = self.nice
            self.children = [subprocess.Popen([sys.executable, "-c", BUSY],
                                              preexec_fn=lambda: os.nice(nice))
                             for _ in range(self.cores)]
            time.sleep(1.0)  # every one of them running before the first timing
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.children:
            child.kill()
        for child in self.children:
            child.wait()


def nice_of(round_name: str) -> int | None:
    """`quiet` is no busy process; `busyN` is one per core at niceness N."""
    if round_name.startswith("quiet"):
        return None
    if round_name.startswith("busy") and round_name[4:].isdigit():
        return int(round_name[4:])
    raise SystemExit(f"bad round {round_name!r}: write quiet or busyN (N the niceness)")


def call_ms(verdict, name: str) -> float | None:
    stats = verdict.measures.get("call", {}).get(name)
    return stats.median_ms if stats else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kb", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", default=SHORT)
    parser.add_argument("--rounds", nargs="*", default=["quiet", "busy0", "busy10", "quiet"])
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--max-elements", type=int, default=1 << 24)
    args = parser.parse_args()
    nices = [nice_of(name) for name in args.rounds]

    from kernelevo.candidate import load_candidate
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.judge import Judge
    from kernelevo.task import load_task

    args.out.mkdir(parents=True, exist_ok=True)
    entries = load_entries(args.only, honest_triton=True)
    if not entries:
        raise SystemExit(f"no honest Triton candidate for problems {args.only}")
    problems = prepare(entries, args.kb, args.out, args.max_elements)
    judges = {p: Judge(load_task(info["path"]), EvalConfig()) for p, info in problems.items()}
    times: dict[str, list[dict]] = {entry["file"]: [] for entry in entries}
    try:
        for index, (name, nice) in enumerate(zip(args.rounds, nices)):
            with Busy(nice, args.cores):
                for entry in entries:
                    verdict = judges[entry["problem"]].evaluate(
                        load_candidate(CANDIDATES / entry["file"]))
                    row = {"round": index, "name": name, "file": entry["file"],
                           "reason": verdict.reason,
                           "candidate_ms": call_ms(verdict, "candidate"),
                           "eager_ms": call_ms(verdict, "eager")}
                    times[entry["file"]].append(row)
                    with (args.out / "call_time_under_load.jsonl").open("a") as file:
                        file.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    finally:
        for judge in judges.values():
            judge.close()
    summary = {"rounds": args.rounds, "cores": args.cores, "candidates": {}}
    for file, rows in times.items():
        first = rows[0] if rows else {}
        summary["candidates"][file] = {
            who: [round(row[f"{who}_ms"] / first[f"{who}_ms"], 3)
                  if row.get(f"{who}_ms") and first.get(f"{who}_ms") else None for row in rows]
            for who in ("candidate", "eager")}
    for who in ("candidate", "eager"):
        summary[f"{who}_ratio_median_by_round"] = [
            round(statistics.median(ratios), 3) if ratios else None
            for ratios in ([c[who][i] for c in summary["candidates"].values()
                            if i < len(c[who]) and c[who][i]] for i in range(len(args.rounds)))]
    (args.out / "call_time_under_load.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
