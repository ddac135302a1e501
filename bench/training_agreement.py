"""The judge's training-step speedups against a plain process's, on a task whose backward is judged.

    python3 bench/training_agreement.py [--task T --candidate C] --out DIR [--runs 2]

One GPU run: `kernelevo eval --json` judges the pair (default: the bundled
examples/layernorm_backward), then bench/plain_training.py times the same
training step `--runs` times, each in a fresh process. Per measure and
baseline (train_call against the plain loop, train_gpu against do_bench and
against the profiler's kernel-time sum, backward_call against the plain
loop's train - forward; eager and
torch.compile) it prints the judge's speedup and interval beside the plain
runs' median and range, and whether the median lies inside the interval or
within 10 % of the judge's figure. Writes DIR/training_agreement.json and .md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "layernorm_backward"
# judge measure -> plain_training.py's figure for the same thing
FIGURES = [("train_call", "train_loop"), ("train_gpu", "train_do_bench"),
           ("train_gpu", "train_kernel"), ("backward_call", "backward_loop"),
           ("backward_call", "backward_replay_loop")]
CLOSE = 0.10  # the plain median within this fraction of the judge's speedup


def judge(task: Path, candidate: Path, log: Path) -> dict:
    command = [sys.executable, "-m", "kernelevo.cli.app", "eval", str(task), str(candidate),
               "--json"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    log.write_text(f"$ {' '.join(command)}\n{done.stdout}\n{done.stderr}")
    start = done.stdout.find("{")
    if start < 0:
        raise SystemExit(f"kernelevo eval printed no verdict (exit {done.returncode}): see {log}")
    return json.loads(done.stdout[start:])


def plain(task: Path, candidate: Path, runs: int, log: Path) -> list[dict]:
    rows = []
    with log.open("w") as handle:
        for _ in range(runs):
            done = subprocess.run([sys.executable, str(HERE / "plain_training.py"), str(task),
                                   str(candidate)], capture_output=True, text=True, check=False)
            handle.write(done.stdout + done.stderr)
            rows += [json.loads(line) for line in done.stdout.splitlines()
                     if line.startswith("{")]
    return rows


def compare(verdict: dict, rows: list[dict]) -> list[dict]:
    table = []
    for measure, figure in FIGURES:
        stats = verdict.get("measures", {}).get(measure, {})
        for baseline in ("eager", "compile"):
            if "candidate" not in stats or baseline not in stats:
                continue
            mine = stats[baseline]["median_ms"] / stats["candidate"]["median_ms"]
            interval = verdict.get("speedup_ranges", {}).get(measure, {}).get(baseline)
            theirs = [row[f"{figure}_speedup_vs_{baseline}"] for row in rows
                      if f"{figure}_speedup_vs_{baseline}" in row]
            if not theirs:  # the plain process has no such figure for this pair
                continue
            median = statistics.median(theirs) if theirs else float("nan")
            low, high = interval or (mine, mine)
            table.append({"measure": measure, "plain": figure, "baseline": baseline, "judge": mine,
                          "interval": [low, high], "plain_median": median,
                          "plain_range": [min(theirs, default=median),
                                          max(theirs, default=median)],
                          "inside": low <= median <= high,
                          "close": abs(median - mine) <= CLOSE * mine})
    return table


def markdown(table: list[dict], facts: dict) -> str:
    lines = [f"Training-step agreement, {facts['date']}, {facts['gpu']}, {facts['runs']} plain "
             f"runs; task {facts['task']}", "",
             "| measure | plain figure | vs | judge | judge interval | plain median | plain range "
             "| inside | within 10 % |", "|---|---|---|---|---|---|---|---|---|"]
    for e in table:
        lines.append(f"| {e['measure']} | {e['plain']} | {e['baseline']} | {e['judge']:.2f} | "
                     f"{e['interval'][0]:.2f}-{e['interval'][1]:.2f} | {e['plain_median']:.2f} "
                     f"| {e['plain_range'][0]:.2f}-{e['plain_range'][1]:.2f} | "
                     f"{'yes' if e['inside'] else 'no'} | {'yes' if e['close'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=Path, default=EXAMPLE / "task.py")
    parser.add_argument("--candidate", type=Path, default=EXAMPLE / "triton_candidate.py")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    # Bytecode kept where the machine writes none (cache_dir.keep_bytecode): the plain
    # processes started from here then import torch in about 5 s, not 14 (GPU machine);
    # only their start is shorter, nothing they time changes.
    sys.path.insert(0, str(HERE.parent / "src"))
    from kernelevo.cache_dir import keep_bytecode

    keep_bytecode()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("training_agreement.py times on a GPU: none here")
    args.out.mkdir(parents=True, exist_ok=True)
    verdict = judge(args.task, args.candidate, args.out / "judge.log")
    if verdict.get("status") != "ok":
        raise SystemExit(f"the judge's verdict: {verdict.get('reason')}: "
                         f"{verdict.get('message', '')[:500]}")
    rows = plain(args.task, args.candidate, args.runs, args.out / "plain.log")
    table = compare(verdict, rows)
    facts = {"date": time.strftime("%Y-%m-%d %H:%M"), "gpu": torch.cuda.get_device_name(0),
             "torch": torch.__version__, "runs": args.runs, "task": str(args.task)}
    (args.out / "training_agreement.json").write_text(json.dumps(
        {"facts": facts, "rows": table, "verdict_measures": verdict.get("measures"),
         "notes": verdict.get("notes"), "plain": rows}, indent=1))
    text = markdown(table, facts)
    (args.out / "training_agreement.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
