"""The judge's speedups against a plain process's, on KernelBench level-1 and level-2 tasks.

    python3 bench/speed_agreement.py --kb .kb0 --out DIR [--plain PATH] [--runs 3]
                                     [--shard I/N] [--only l2_81,...] [--kind conv]
                                     [--suite-args "..."]
    python3 bench/speed_agreement.py --out DIR --summarize SHARD_DIR ...   # one table
    python3 bench/speed_agreement.py --out DIR --rescore AGREEMENT.json PLAIN.log

One GPU run: `kernelevo suite` judges every pair below with default flags
(the task files copied into DIR/tasks, the candidates into DIR/solutions),
then `plain_timing.py` (../shared/tools/plain_timing.py, or --plain) times
every pair `--runs` times, each pair in a fresh process (`--one`, as its own
driver runs them), pass after pass (so a pair's plain runs lie minutes
apart), the judge's host-speed loop timed in a process of its own right
before each. Per task and measure (call against
the plain loop, gpu against do_bench) it prints the judge's speedup over
eager and its interval, the plain runs' median and range, whether the
median lies inside the interval, whether the interval is no wider than the
plain range plus 10 % of its median, and each contestant's milliseconds
against the plain process's. Writes DIR/agreement.json and DIR/agreement.md,
again after every plain run, so a call cut by its limit keeps each run done.
`--rescore` makes the table again from a run's agreement.json and its
plain.log, every plain run the log holds counted (a pass cut before that
table was written; those runs' host probes are not in the log).

`--kb` is a KernelBench checkout (its KernelBench/level1 and level2 folders).
The pairs are the honest Triton candidates of bench/kernelbench/candidates;
the sizes are the checkout's (KernelBench before its July 2025 resize has the
small, launch-bound sizes most published solutions were written for).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agreement_table import (compare, host_follows, kernel_bound, markdown,  # noqa: E402,F401
                             quiet_cores)

HERE = Path(__file__).resolve().parent
CANDIDATES = HERE / "kernelbench" / "candidates"

# (level, problem, candidate file, kind): kind "conv" for convolution tasks
PAIRS = [
    (1, 19, "19_relu__honest.py", "elementwise"),
    (1, 20, "20_leaky_relu__honest.py", "elementwise"),
    (1, 21, "21_sigmoid__honest.py", "elementwise"),
    (1, 22, "22_tanh__honest.py", "elementwise"),
    (1, 23, "23_softmax__honest.py", "reduction"),
    (1, 26, "26_gelu__honest.py", "elementwise"),
    (1, 29, "29_softplus__honest.py", "elementwise"),
    (1, 36, "36_rmsnorm__honest.py", "reduction"),
    (1, 40, "40_layernorm__honest.py", "reduction"),
    (1, 47, "47_sum_dim__honest.py", "reduction"),
    (1, 88, "88_mingpt_gelu__honest.py", "elementwise"),
    (1, 94, "94_mse_loss__honest.py", "loss"),
    (1, 95, "95_cross_entropy__honest.py", "loss"),
    (1, 100, "100_hinge_loss__honest.py", "loss"),
    (1, 1, "1_square_matmul__honest.py", "gemm"),
    (1, 4, "4_matvec__honest.py", "gemm"),
    (2, 12, "l2_12_gemm_multiply_leakyrelu__honest.py", "gemm"),
    (2, 14, "l2_14_gemm_divide_sum_scale__honest.py", "gemm"),
    (2, 29, "l2_29_matmul_mish_mish__honest.py", "gemm"),
    (2, 59, "l2_59_matmul_swish_scale__honest.py", "gemm"),
    (2, 76, "l2_76_gemm_add_relu__honest.py", "gemm"),
    (2, 81, "l2_81_gemm_swish_divide_clamp_tanh_clamp__honest.py", "gemm"),
    (2, 86, "l2_86_matmul_divide_gelu__honest.py", "gemm"),
    (2, 88, "l2_88_gemm_groupnorm_swish_multiply_swish__honest.py", "gemm"),
    (2, 1, "l2_1_conv2d_relu_biasadd__honest.py", "conv"),
    (2, 2, "l2_2_convtranspose2d_bias_clamp_scale_clamp_divide__honest.py", "conv"),
    (2, 16, "l2_16_convtranspose2d_mish_add_hardtanh_scale__honest.py", "conv"),
    (2, 20, "l2_20_convtranspose3d_sum_residual_multiply_residual__honest.py", "conv"),
    (2, 26, "l2_26_convtranspose3d_add_hardswish__honest.py", "conv"),
    (2, 47, "l2_47_conv3d_mish_tanh__honest.py", "conv"),
    (2, 57, "l2_57_conv2d_relu_hardswish__honest.py", "conv"),
    (2, 71, "l2_71_conv2d_divide_leakyrelu__honest.py", "conv"),
]



def task_file(kb: Path, level: int, problem: int) -> Path:
    folder = kb / "KernelBench" / f"level{level}"
    found = sorted(folder.glob(f"{problem}_*.py"))
    if not found:
        raise SystemExit(f"no level{level}/{problem} in {folder}")
    return found[0]


def stage(kb: Path, out: Path, pairs: list[tuple]) -> list[dict]:
    """Copy tasks and candidates where the suite finds them; one dict per pair."""
    tasks, solutions = out / "tasks", out / "solutions"
    for folder in (tasks, solutions):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    staged = []
    for level, problem, candidate, kind in pairs:
        source = task_file(kb, level, problem)
        stem = f"l{level}_{source.stem}"
        shutil.copy(source, tasks / f"{stem}.py")
        shutil.copy(CANDIDATES / candidate, solutions / f"{stem}__honest.py")
        staged.append({"stem": stem, "kind": kind, "task": str(tasks / f"{stem}.py"),
                       "candidate": str(solutions / f"{stem}__honest.py")})
    return staged


def run_suite(out: Path, extra: list[str]) -> tuple[list[dict], float]:
    suite_out = out / "suite"
    shutil.rmtree(suite_out, ignore_errors=True)
    command = [sys.executable, "-m", "kernelevo.cli.app", "suite", str(out / "tasks"),
               "--solutions", str(out / "solutions"), "--out", str(suite_out), *extra]
    print("$", " ".join(command), flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=False)
    took = time.perf_counter() - started
    rows = [json.loads(line) for line in (suite_out / "results.jsonl").read_text().splitlines()
            if line.strip()] if (suite_out / "results.jsonl").exists() else []
    return rows, took


# A plain run's process, started ahead: it imports what plain_timing.py imports at its top
# (no CUDA: nothing touches the GPU), says so, and waits on its stdin; told to go, it runs
# plain_timing.py as `python3 plain_timing.py --one TASK CANDIDATE` would, in the same process.
# Its stdin closed without a go (this script stopped or cut by its limit), it ends untimed:
# it must not time beside whatever runs on the GPU next.
WAITER = ("import runpy, sys; import torch, triton.testing; print('ready', flush=True); "
          "sys.exit(0) if sys.stdin.readline().strip() != 'go' else None; "
          "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


class _Waiting:
    """One plain run in its own fresh process, its imports done before its turn."""

    def __init__(self, plain: Path, item: dict) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", WAITER, str(plain), "--one", item["task"], item["candidate"]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ready(self) -> bool:
        """Block until its imports are done; False where it died first."""
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip() == "ready"

    def go(self) -> tuple[str, str]:
        """Time its pair now; its stdout (the JSON row) and stderr."""
        try:
            return self.process.communicate("go\n")
        except BrokenPipeError:  # it died before its turn
            return "", self.process.stderr.read() if self.process.stderr else ""


def run_plain(plain: Path, staged: list[dict], runs: int, log: Path,
              after_run: Any = None, ahead: int = 8) -> dict[str, list[dict]]:
    """Each pair `runs` times, pass after pass; pair stem -> its runs' JSON rows.

    Each run is plain_timing.py's `--one` in a fresh process of its own, as its
    own driver runs it. With `ahead` > 0 the next `ahead` runs' processes import
    torch and Triton together while none is timing, then time one after
    another, each alone (4.9 s a run on one H100; 6.5 s without, on another: bench/RESULTS.md);
    `ahead` 0 starts each run's process on its turn. `after_run(by_stem)`
    runs after each run, so a call cut by its limit keeps every run done."""
    by_stem: dict[str, list[dict]] = {item["stem"]: [] for item in staged}
    batch = max(ahead, 1)
    with log.open("w") as sink:
        for index in range(runs):
            started = time.perf_counter()
            for first in range(0, len(staged), batch):
                items = staged[first:first + batch]
                waiting = [_Waiting(plain, item) for item in items] if ahead else []
                alive = [w.ready() for w in waiting]
                for position, item in enumerate(items):
                    # The host's speed probed just before, as the judge probes it before
                    # each round of calls (host_speed.py).
                    host_us = host_probe_us()
                    if ahead:
                        stdout, stderr = waiting[position].go()
                        if not alive[position]:
                            stderr = f"{item['stem']}: its process ended before its turn\n" + stderr
                    else:
                        done = subprocess.run([sys.executable, str(plain), "--one", item["task"],
                                               item["candidate"]], capture_output=True,
                                              text=True, check=False)
                        stdout, stderr = done.stdout, done.stderr
                    sink.write(stdout + stderr)
                    for line in stdout.splitlines():
                        if line.startswith("{"):
                            by_stem[item["stem"]].append({**json.loads(line),
                                                          "host_probe_us": host_us,
                                                          "imported_ahead": bool(ahead)})
                    if after_run is not None:
                        after_run(by_stem)
            print(f"plain pass {index + 1}/{runs}: {time.perf_counter() - started:.0f} s",
                  flush=True)
    return by_stem


def rescore(recorded: Path, log: Path, out: Path) -> str:
    """The table again from a run's agreement.json and every plain run its plain.log holds
    (in the log's order; host probes from the recorded runs where they are there)."""
    data = json.loads(recorded.read_text())
    kinds = {row["task"]: row["kind"] for row in data["rows"]}
    runs: dict[str, list[dict]] = {stem: [] for stem in kinds}
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            run = json.loads(line)
            stem = Path(run["task"]).stem
            if stem in runs:
                known = data.get("plain", {}).get(stem, [])
                probe = known[len(runs[stem])].get("host_probe_us") \
                    if len(runs[stem]) < len(known) else None
                runs[stem].append({**run, "host_probe_us": probe})
    staged = [{"stem": stem, "kind": kind} for stem, kind in kinds.items()]
    table = compare(staged, data["suite_rows"], runs)
    facts = {**data["facts"], "runs": min((len(v) for v in runs.values()), default=0),
             "runs_most": max((len(v) for v in runs.values()), default=0),
             "rescored_from": str(log)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "agreement.json").write_text(json.dumps(
        {"facts": facts, "rows": table, "suite_rows": data["suite_rows"], "plain": runs},
        indent=1))
    text = markdown(table, facts)
    (out / "agreement.md").write_text(text)
    return text


PROBE = ("import statistics; from kernelevo.evaluate.child.host_speed import probe_us; "
         "[probe_us() for _ in range(20)]; "
         "print(statistics.median(probe_us() for _ in range(100)))")


def host_probe_us() -> float | None:
    """The judge's host-speed loop, timed in a fresh process of its own: its median in us."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          check=False, env={**os.environ, "PYTHONPATH": str(HERE.parent / "src")})
    try:
        return float(done.stdout.strip())
    except ValueError:
        return None


def merge(folders: list[Path], out: Path) -> None:
    """One table from several shards' agreement.json (each shard one device call)."""
    table, facts = [], None
    for folder in folders:
        data = json.loads((folder / "agreement.json").read_text())
        for row in data["rows"]:  # shards written before the split had no such field
            runs = data.get("plain", {}).get(row["task"])
            if row["measure"] == "gpu" and "judge" in row and runs:
                row.setdefault("plain_kernel_bound", kernel_bound(runs))
        table += data["rows"]
        if facts is None:
            facts = dict(data["facts"])
        else:
            facts["suite_s"] += data["facts"]["suite_s"]
            facts["plain_s"] += data["facts"]["plain_s"]
    if facts is None:
        raise SystemExit("--summarize: give the shards' output folders")
    out.mkdir(parents=True, exist_ok=True)
    (out / "agreement.json").write_text(json.dumps({"facts": facts, "rows": table}, indent=1))
    text = markdown(table, facts)
    (out / "agreement.md").write_text(text)
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plain", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated stems' prefixes, e.g. l2_81")
    parser.add_argument("--kind", default="", help="only pairs of this kind: " + ", ".join(
        sorted({pair[3] for pair in PAIRS})) + " (conv: the 8 convolution pairs, about 450 s with --runs 3)")
    parser.add_argument("--suite-args", default="", help="extra flags for kernelevo suite")
    parser.add_argument("--ahead", type=int, default=8,
                        help="plain runs whose processes import torch together before their "
                             "turns (none times meanwhile); 0: each process started on its turn")
    parser.add_argument("--shard", default="1/1",
                        help="I/N: every Nth pair from the Ith (32 pairs: the suite about 85 s, "
                             "a plain pass about 160 s on an H100)")
    parser.add_argument("--rescore", nargs=2, type=Path, default=None,
                        metavar=("AGREEMENT_JSON", "PLAIN_LOG"),
                        help="the table again from a run's files, every plain run counted")
    parser.add_argument("--summarize", nargs="*", type=Path, default=None,
                        help="merge these shards' agreement.json into --out's table; no GPU")
    args = parser.parse_args()
    if args.summarize is not None:
        merge(args.summarize, args.out)
        return
    if args.rescore is not None:
        print(rescore(args.rescore[0], args.rescore[1], args.out))
        return
    # Bytecode kept where the machine writes none (cache_dir.keep_bytecode): the plain
    # processes started from here then import torch in about 5 s, not 14 (GPU machine);
    # only their start is shorter, nothing they time changes.
    sys.path.insert(0, str(HERE.parent / "src"))
    from kernelevo.cache_dir import keep_bytecode

    keep_bytecode()
    import torch
    import triton

    if not torch.cuda.is_available():
        raise SystemExit("speed_agreement.py times on a GPU: none here")
    if args.kb is None:
        raise SystemExit("--kb: give a KernelBench checkout")
    plain = args.plain or next((p for p in (HERE.parent.parent / "shared/tools/plain_timing.py",
                                            HERE.parent / ".plain/plain_timing.py")
                                if p.exists()), None)
    if plain is None or not plain.exists():
        raise SystemExit("plain_timing.py not found: pass --plain PATH")
    index, count = (int(x) for x in args.shard.split("/"))
    pairs = PAIRS[index - 1::count]
    if args.kind:
        pairs = [p for p in pairs if p[3] == args.kind]
    if args.only:
        wanted = tuple(args.only.split(","))
        pairs = [p for p in pairs if f"l{p[0]}_{p[1]}" in wanted]
    args.out.mkdir(parents=True, exist_ok=True)
    staged = stage(args.kb, args.out, pairs)
    rows, suite_s = run_suite(args.out, args.suite_args.split())
    if not rows:  # the judge failed: timing the plain side would only spend the GPU call
        raise SystemExit(f"kernelevo suite gave no rows in {suite_s:.0f} s: see its output above")
    started = time.perf_counter()

    def write(plain_rows: dict[str, list[dict]]) -> str:
        table = compare(staged, rows, plain_rows)
        passes = min((len(v) for v in plain_rows.values()), default=0)
        facts = {"date": time.strftime("%Y-%m-%d %H:%M"), "gpu": torch.cuda.get_device_name(0),
                 "torch": torch.__version__, "triton": triton.__version__, "suite_s": suite_s,
                 "plain_s": time.perf_counter() - started, "runs": passes,
                 "runs_most": max((len(v) for v in plain_rows.values()), default=0),
                 "host": os.uname().nodename}
        (args.out / "agreement.json").write_text(json.dumps(
            {"facts": facts, "rows": table, "suite_rows": rows, "plain": plain_rows}, indent=1))
        text = markdown(table, facts)
        (args.out / "agreement.md").write_text(text)
        return text

    print(write(run_plain(plain, staged, args.runs, args.out / "plain.log", after_run=write,
                          ahead=args.ahead)))


if __name__ == "__main__":
    main()
