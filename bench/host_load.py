"""Whether work on the other cores slows a launch-bound call on a core of its own.

    python3 bench/host_load.py --kb .kb0 --out DIR [--only l1_19,l1_21,l2_86]
                               [--plain .plain/plain_timing.py] [--runs 2]
                               [--loads none,spin,stream,stream-stopped]

The judge times on a core kept free (evaluate/shared/cores.py) while a
suite's other lanes compile, build and check on the others; a plain process
times on a quiet machine. Under six lanes the level-1 elementwise candidates'
calls (one Triton launch each) read 1.1-1.8x plain's milliseconds (session
33, bench/RESULTS.md), where a single spinning neighbour had moved the host
probe 0.99-1.02x (session 28). This times the same pairs with plain_timing.py
(`--one`, a fresh process a run, pinned to the last allowed core as the
judge's timing is) under each load on every other allowed core:

- none: nothing else runs;
- spin: one process a core, a Python loop (the core busy, no memory traffic);
- stream: one process a core copying a 256 MiB buffer over and over (the
  last-level cache and memory bandwidth busy, as compilers and builds keep them);
- stream-stopped: the stream processes started, then stopped (SIGSTOP) before
  the run and continued after: what holding other lanes' processes would give.

Per pair and load it prints the plain loop's milliseconds of both contestants
and their speedup, against the same under no load. Writes DIR/host_load.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from speed_agreement import PAIRS, stage  # noqa: E402

LOADS = ("none", "spin", "stream", "stream-stopped")
SPIN = "while True: pass"
STREAM = ("buffer = bytearray(256 << 20)\n"
          "while True:\n"
          "    copy = bytes(buffer)\n"
          "    del copy\n")


def start_load(kind: str, cores: list[int]) -> list[subprocess.Popen]:
    """One process a core running the load's loop, each pinned to its core."""
    if kind == "none":
        return []
    body = SPIN if kind == "spin" else STREAM
    found = []
    for core in cores:
        process = subprocess.Popen([sys.executable, "-c", body], stdin=subprocess.DEVNULL)
        os.sched_setaffinity(process.pid, {core})
        found.append(process)
    time.sleep(1.0)  # every loop running (its buffer made) before the timing
    return found


def stop_load(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        try:
            os.kill(process.pid, signal.SIGCONT)  # a stopped one ends only once continued
        except ProcessLookupError:
            pass
        process.kill()
        process.wait()


def pause(processes: list[subprocess.Popen], on: bool) -> None:
    for process in processes:
        os.kill(process.pid, signal.SIGSTOP if on else signal.SIGCONT)


def plain_run(plain: Path, item: dict, core: int) -> dict | None:
    """plain_timing.py --one on the pair, pinned to `core`: its JSON row."""
    done = subprocess.run([sys.executable, str(plain), "--one", item["task"], item["candidate"]],
                          capture_output=True, text=True, check=False,
                          preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    print(f"{item['stem']}: no row\n{done.stderr[-2000:]}", file=sys.stderr, flush=True)
    return None


def summarize(rows: list[dict]) -> list[dict]:
    """Per pair and load: the median of each contestant's loop ms and of the speedup, and
    their ratio to the same pair's under no load."""
    table = []
    for stem in sorted({row["stem"] for row in rows}):
        quiet = None
        for load in LOADS:
            runs = [row for row in rows if row["stem"] == stem and row["load"] == load]
            if not runs:
                continue
            entry = {"stem": stem, "load": load, "runs": len(runs)}
            for key in ("loop_ms_ref", "loop_ms_cand", "loop_speedup"):
                entry[key] = statistics.median(run[key] for run in runs)
            if load == "none":
                quiet = entry
            if quiet is not None:
                for key in ("loop_ms_ref", "loop_ms_cand", "loop_speedup"):
                    entry[f"{key}_vs_none"] = entry[key] / quiet[key]
            table.append(entry)
    return table


def markdown(table: list[dict], facts: dict) -> str:
    lines = [f"host load: timing core {facts['core']}, load on {len(facts['load_cores'])} "
             f"cores, {facts['runs']} runs a pair and load", "",
             "| pair | load | eager ms | candidate ms | speedup | eager vs none | "
             "candidate vs none | speedup vs none |", "|---|---|---|---|---|---|---|---|"]
    for entry in table:
        versus = [f"{entry[key]:.2f}x" if key in entry else "-" for key in
                  ("loop_ms_ref_vs_none", "loop_ms_cand_vs_none", "loop_speedup_vs_none")]
        lines.append(f"| {entry['stem']} | {entry['load']} | {entry['loop_ms_ref']:.4f} | "
                     f"{entry['loop_ms_cand']:.4f} | {entry['loop_speedup']:.2f} | "
                     + " | ".join(versus) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plain", type=Path, default=HERE.parent.parent / "shared" / "tools"
                        / "plain_timing.py")
    parser.add_argument("--only", default="l1_19,l1_21,l2_86")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--loads", default=",".join(LOADS))
    args = parser.parse_args()
    loads = [load for load in args.loads.split(",") if load]
    unknown = set(loads) - set(LOADS)
    if unknown:
        parser.error(f"unknown loads {sorted(unknown)}: choose from {', '.join(LOADS)}")
    if not args.plain.exists():
        parser.error(f"no plain_timing.py at {args.plain}")
    wanted = [w for w in args.only.split(",") if w]
    pairs = [pair for pair in PAIRS if any(f"l{pair[0]}_{pair[1]}" == w for w in wanted)]
    if not pairs:
        parser.error(f"no pair matches {args.only}")
    args.out.mkdir(parents=True, exist_ok=True)
    staged = stage(args.kb, args.out, pairs)
    allowed = sorted(os.sched_getaffinity(0))
    core, load_cores = allowed[-1], allowed[:-1]
    os.sched_setaffinity(0, set(load_cores))  # this driver off the timing core
    facts = {"core": core, "load_cores": load_cores, "runs": args.runs, "loads": loads}
    rows: list[dict] = []
    for index in range(args.runs):
        for load in loads:  # loads in turn within a pass, so drift over time hits each alike
            processes = start_load(load.replace("-stopped", ""), load_cores)
            try:
                for item in staged:
                    if load.endswith("-stopped"):
                        pause(processes, True)
                    try:
                        row = plain_run(args.plain, item, core)
                    finally:
                        if load.endswith("-stopped"):
                            pause(processes, False)
                    if row is not None:
                        rows.append({**row, "stem": item["stem"], "load": load, "run": index})
            finally:
                stop_load(processes)
            print(f"pass {index + 1}, {load}: {len(rows)} rows so far", flush=True)
            table = summarize(rows)
            (args.out / "host_load.json").write_text(json.dumps(
                {"facts": facts, "rows": rows, "table": table}, indent=1))
            (args.out / "host_load.md").write_text(markdown(table, facts))
    print(markdown(summarize(rows), facts))


if __name__ == "__main__":
    main()
