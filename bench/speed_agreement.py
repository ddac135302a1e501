"""The judge's speedups against a plain process's, on KernelBench level-1 and level-2 tasks.

    python3 bench/speed_agreement.py --kb .kb0 --out DIR [--plain PATH] [--runs 3]
                                     [--shard I/N] [--only l2_81,...] [--kind conv]
                                     [--suite-args "..."]
    python3 bench/speed_agreement.py --out DIR --summarize SHARD_DIR ...   # one table

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
against the plain process's. Writes DIR/agreement.json and DIR/agreement.md.

`--kb` is a KernelBench checkout (its KernelBench/level1 and level2 folders).
The pairs are the honest Triton candidates of bench/kernelbench/candidates;
the sizes are the checkout's (KernelBench before its July 2025 resize has the
small, launch-bound sizes most published solutions were written for).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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

# judge measure -> plain_timing.py's key for the same thing
MEASURES = {"call": "loop", "gpu": "do_bench"}
WIDTH_SLACK = 0.10  # the interval may be the plain range plus this fraction of its median
ABS_SLACK = 0.10  # milliseconds within 10 % of the plain process's, or inside its range
# plain's do_bench is device time only while the host keeps ahead of its queue: where it
# reads more than this many times the profiler's kernel time, the host's launches are in it
KERNEL_BOUND = 1.3


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
              after_pass: Any = None, ahead: int = 8) -> dict[str, list[dict]]:
    """Each pair `runs` times, pass after pass; pair stem -> its runs' JSON rows.

    Each run is plain_timing.py's `--one` in a fresh process of its own, as its
    own driver runs it. With `ahead` > 0 the next `ahead` runs' processes import
    torch and Triton together while none is timing, then time one after
    another, each alone (4.9 s a run on one H100; 6.5 s without, on another: bench/RESULTS.md);
    `ahead` 0 starts each run's process on its turn. `after_pass(by_stem)`
    runs after each pass, so a call cut by its limit keeps the passes done."""
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
            print(f"plain pass {index + 1}/{runs}: {time.perf_counter() - started:.0f} s",
                  flush=True)
            if after_pass is not None:
                after_pass(by_stem)
    return by_stem


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


def compare(staged: list[dict], rows: list[dict], plain: dict[str, list[dict]]) -> list[dict]:
    """One entry per task and measure."""
    by_stem = {Path(row["task"]).stem if "/" in str(row["task"]) else row["task"]: row
               for row in rows}
    table = []
    for item in staged:
        row = next((r for key, r in by_stem.items() if key.endswith(item["stem"])), None)
        runs = plain[item["stem"]]
        for measure, theirs in MEASURES.items():
            entry = {"task": item["stem"], "kind": item["kind"], "measure": measure,
                     "verdict": row["reason"] if row else "missing"}
            mine = ((row or {}).get("measures") or {}).get(measure) or {}
            ups = [r[f"{theirs}_speedup"] for r in runs]
            if not mine.get("speedup", {}).get("eager") or not ups:
                table.append(entry)
                continue
            judged = mine["speedup"]["eager"]
            entry.update(
                judge=judged, interval=mine.get("range", {}).get("eager") or [judged, judged],
                plain_median=statistics.median(ups), plain_range=[min(ups), max(ups)],
                plain_runs=ups,
                eager_ms=mine["ms"]["eager"], candidate_ms=mine["ms"]["candidate"],
                plain_ref_ms=[r[f"{theirs}_ms_ref"] for r in runs],
                plain_cand_ms=[r[f"{theirs}_ms_cand"] for r in runs],
                host_spread=(row or {}).get("host_speed_spread") or "-",
                timing_core=(row or {}).get("timing_core") or "-",
                judge_host_us=_number((row or {}).get("host_probe_us")),
                plain_host_us=[r.get("host_probe_us") for r in runs],
                **quiet_cores((row or {}).get("phases_s") or {}))
            low, high = entry["interval"]
            entry["inside"] = low <= entry["plain_median"] <= high
            plain_width = entry["plain_range"][1] - entry["plain_range"][0]
            entry["width_ok"] = high - low <= plain_width + WIDTH_SLACK * entry["plain_median"]
            entry["ms_ok"] = (_ms_agrees(entry["eager_ms"], entry["plain_ref_ms"])
                              and _ms_agrees(entry["candidate_ms"], entry["plain_cand_ms"]))
            if measure == "gpu":
                entry["plain_kernel_bound"] = kernel_bound(runs)
            table.append(entry)
    return table


def quiet_cores(phases: dict) -> dict:
    """Busy cores off the timing cores, and the judge's own, while the row's calls were
    timed with the other jobs stood still (evaluate/sandbox/quiet_load.py); {} if unmeasured."""
    seconds = phases.get("quiet") or 0.0
    if seconds <= 0:
        return {}
    return {"quiet_busy_cores": (phases.get("quiet_busy_elsewhere") or 0.0) / seconds,
            "quiet_judge_cores": (phases.get("quiet_judge_cpu") or 0.0) / seconds,
            "quiet_steal_s": phases.get("quiet_steal") or 0.0}


def kernel_bound(runs: list[dict]) -> bool:
    """Whether every plain run's do_bench, of both contestants, read device time.

    `do_bench` queues a flush and a call per sample without waiting; when the
    host takes longer to launch them than the device to run them, the events
    hold the host's time, and the run reads between the kernels' time and the
    call loop's. The profiler's kernel time is the reference.
    """
    return all(run[f"do_bench_ms_{who}"] <= KERNEL_BOUND * run[f"kernel_ms_{who}"]
               for run in runs for who in ("ref", "cand")
               if run.get(f"kernel_ms_{who}"))


def _ms_agrees(mine: float, theirs: list[float]) -> bool:
    middle = statistics.median(theirs)
    return abs(mine - middle) <= ABS_SLACK * middle or min(theirs) <= mine <= max(theirs)


def host_follows(probed: list[dict]) -> tuple[float, float] | None:
    """How closely each contestant's call ms (judge / plain) follow the host probe's ratio.

    Pearson's correlation of the logarithms, over call rows with probes on
    both sides; None for fewer than three rows or no spread to correlate.
    """
    if len(probed) < 3:
        return None
    host = [math.log(e["judge_host_us"] / statistics.median(e["plain_host_us"])) for e in probed]
    found = []
    for mine, theirs in (("eager_ms", "plain_ref_ms"), ("candidate_ms", "plain_cand_ms")):
        ms = [math.log(e[mine] / statistics.median(e[theirs])) for e in probed]
        try:
            found.append(statistics.correlation(host, ms))
        except statistics.StatisticsError:  # one of them constant
            return None
    return found[0], found[1]


def markdown(table: list[dict], facts: dict) -> str:
    lines = [f"Speed agreement, {facts['date']}, {facts['gpu']}, torch {facts['torch']}, "
             f"triton {facts['triton']}; suite {facts['suite_s']:.0f} s, plain "
             f"{facts['plain_s']:.0f} s ({facts['runs']} runs per pair)", "",
             "| task | kind | measure | judge | judge interval | plain median | plain range "
             "| inside | width ok | eager ms (judge / plain) | candidate ms (judge / plain) "
             "| host spread | host probe us (judge / plain) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in table:
        if "judge" not in e:
            lines.append(f"| {e['task']} | {e['kind']} | {e['measure']} | {e['verdict']} "
                         "| - | - | - | - | - | - | - | - | - |")
            continue
        lines.append(
            f"| {e['task']} | {e['kind']} | {e['measure']} | {e['judge']:.2f} | "
            f"{e['interval'][0]:.2f}-{e['interval'][1]:.2f} | {e['plain_median']:.2f} | "
            f"{e['plain_range'][0]:.2f}-{e['plain_range'][1]:.2f} | "
            f"{'yes' if e['inside'] else 'NO'} | {'yes' if e['width_ok'] else 'NO'} | "
            f"{e['eager_ms']:.4f} / {statistics.median(e['plain_ref_ms']):.4f} | "
            f"{e['candidate_ms']:.4f} / {statistics.median(e['plain_cand_ms']):.4f} | "
            f"{e.get('host_spread', '-')} | {_probes(e)} |")
    scored = [e for e in table if "judge" in e]
    conv = [e for e in scored if e["kind"] == "conv"]
    short = [e for e in scored if e["measure"] == "call" and e["candidate_ms"] < 0.05]
    lines += ["", f"- rows compared: {len(scored)} of {len(table)} "
              f"({len(short)} call rows under 50 us, {len(conv)} convolution rows)",
              f"- plain median inside the judge's interval: "
              f"{sum(e['inside'] for e in scored)}/{len(scored)}",
              f"- interval no wider than the plain range + 10 %: "
              f"{sum(e['width_ok'] for e in scored)}/{len(scored)}",
              f"- both contestants' ms within 10 % of plain (or inside its range): "
              f"{sum(e['ms_ok'] for e in scored)}/{len(scored)}",
              f"- convolution rows inside: {sum(e['inside'] for e in conv)}/{len(conv)}, "
              f"speedup within 10 % of plain: "
              f"{sum(abs(e['judge'] / e['plain_median'] - 1) <= 0.10 for e in conv)}/{len(conv)}"]
    calls = [(e, _percent(e.get("host_spread"))) for e in scored if e["measure"] == "call"]
    moving = [e for e, spread in calls if spread >= 5]
    steady = [e for e, spread in calls if 0 <= spread < 5]
    if moving or steady:
        lines.append(f"- call rows inside, host spread 5 % or more: "
                     f"{sum(e['inside'] for e in moving)}/{len(moving)}; under 5 %: "
                     f"{sum(e['inside'] for e in steady)}/{len(steady)}")
    cores_said = [str(e.get("timing_core", "-")) for e in scored if e["measure"] == "call"]
    if any(said != "-" for said in cores_said):
        lines.append(f"- pairs timed on a core kept free: "
                     f"{sum('kept free' in said for said in cores_said)}/{len(cores_said)} "
                     f"({cores_said[0]})")
    probed = [e for e in scored if e["measure"] == "call" and e.get("judge_host_us")
              and all(e.get("plain_host_us") or [None])]
    if probed:
        # the host's loop slower while the judge timed than while plain did, by row
        slower = [e for e in probed
                  if e["judge_host_us"] > 1.1 * statistics.median(e["plain_host_us"])]
        ratios = [e["judge_host_us"] / statistics.median(e["plain_host_us"]) for e in probed]
        lines.append(f"- call rows whose host probe read more than 10 % slower while the "
                     f"judge timed than before the plain runs: {len(slower)}/{len(probed)} "
                     f"(median ratio {statistics.median(ratios):.2f}); of those, both ms "
                     f"within 10 % of plain: {sum(e['ms_ok'] for e in slower)}/{len(slower)}; "
                     f"of the rest: {sum(e['ms_ok'] for e in probed if e not in slower)}/"
                     f"{len(probed) - len(slower)}")
        follows = host_follows(probed)
        if follows:
            lines.append(f"- host probe ratio (judge / plain) against each contestant's call ms "
                         f"ratio, in logarithms: correlation {follows[0]:.2f} for eager, "
                         f"{follows[1]:.2f} for the candidate, over {len(probed)} call rows")
    quieted = [e for e in scored if e["measure"] == "call" and "quiet_busy_cores" in e]
    if quieted:
        busy = [e for e in quieted if e["quiet_busy_cores"] >= 1.0]
        lines.append(
            f"- while the judge timed the calls, others stood still: busy cores off the timing "
            f"cores {statistics.median(e['quiet_busy_cores'] for e in quieted):.2f} (median; "
            f"the judge's own process "
            f"{statistics.median(e['quiet_judge_cores'] for e in quieted):.2f}), stolen from "
            f"the timing cores {sum(e['quiet_steal_s'] for e in quieted):.2f} s in all; both ms "
            f"within 10 % of plain where 1 core or more was busy: "
            f"{sum(e['ms_ok'] for e in busy)}/{len(busy)}, where less: "
            f"{sum(e['ms_ok'] for e in quieted if e not in busy)}/{len(quieted) - len(busy)}")
    gpu = [e for e in scored if "plain_kernel_bound" in e]
    if gpu:
        bound = [e for e in gpu if e["plain_kernel_bound"]]
        hosted = [e for e in gpu if not e["plain_kernel_bound"]]
        lines.append(f"- gpu rows inside, plain's do_bench within {KERNEL_BOUND}x of the "
                     f"profiler's kernel time in every run: {sum(e['inside'] for e in bound)}/"
                     f"{len(bound)}; above it (launches or a cold L2 in do_bench): "
                     f"{sum(e['inside'] for e in hosted)}/{len(hosted)}")
    return "\n".join(lines) + "\n"


def _probes(entry: dict) -> str:
    """The host probe's medians, the judge's and each plain run's, as a table cell."""
    mine, theirs = entry.get("judge_host_us"), [t for t in entry.get("plain_host_us") or [] if t]
    if not mine and not theirs:
        return "-"
    return (f"{mine:.0f}" if mine else "-") + " / " + (", ".join(f"{t:.0f}" for t in theirs)
                                                       or "-")


def _number(said: Any) -> float | None:
    try:
        return float(said)
    except (TypeError, ValueError):
        return None


def _percent(said: Any) -> float:
    """A verdict's `host_speed_spread` ("7.5%") as a number; -1 where none was given."""
    try:
        return float(str(said).rstrip("%"))
    except ValueError:
        return -1.0


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
    parser.add_argument("--summarize", nargs="*", type=Path, default=None,
                        help="merge these shards' agreement.json into --out's table; no GPU")
    args = parser.parse_args()
    if args.summarize is not None:
        merge(args.summarize, args.out)
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
                 "host": os.uname().nodename}
        (args.out / "agreement.json").write_text(json.dumps(
            {"facts": facts, "rows": table, "suite_rows": rows, "plain": plain_rows}, indent=1))
        text = markdown(table, facts)
        (args.out / "agreement.md").write_text(text)
        return text

    print(write(run_plain(plain, staged, args.runs, args.out / "plain.log", after_pass=write,
                          ahead=args.ahead)))


if __name__ == "__main__":
    main()
