"""Where the run-to-run spread of host (call) time comes from, and what torch.compile costs per call.

    python3 bench/host_noise.py --out DIR TASK.py CANDIDATE.py [TASK.py CANDIDATE.py ...]

For each pair, fresh processes (one after another, nothing else on the GPU):

- `compile` (once): eager, the candidate and three ways of calling a compiled
  reference, each timed in 15 interleaved rounds of back-to-back calls:
  `compile` (torch.compile(model), dynamo's guards checked on every call),
  `compile_noguard` (the same under torch.compiler.set_stance(
  skip_guard_eval_unsafe=True)), and `compile_x4` (one compiled forward that
  calls the model on four input sets: dynamo's per-call cost paid once for
  four calls, as inside a larger compiled model; time / 4). Device time of
  each by triton.testing.do_bench too.
- `free` and `pinned` (three each, alternating): eager and the candidate in
  15 interleaved rounds; `pinned` runs on one CPU core (sched_setaffinity).

Within-process spread (rounds) against between-process spread (runs) says
whether a single judge process can see the variation a rerun shows. Machine
facts (cores, clocks, load, other busy processes) are recorded at the start
and end. Writes DIR/rows.jsonl and DIR/machine.json; prints a table last.
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

ROUNDS = 15


def _load(path: str, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # torch.compile looks the module up by name
    spec.loader.exec_module(module)
    return module


def _cpu_now() -> int:
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[36])  # field 39 of stat: the CPU last run on


def _rounds(calls: dict, per_call_target_ms: float = 20.0) -> dict:
    import torch

    per_call = {}
    for name, fn in calls.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        per_call[name] = (time.perf_counter() - started) * 1e3 / 20
    counts = {n: int(min(2000, max(20, per_call_target_ms / max(t, 1e-3)))) for n, t in per_call.items()}
    times: dict[str, list[float]] = {n: [] for n in calls}
    cpus: set[int] = set()
    names = list(calls)
    for index in range(ROUNDS):
        order = names[index % len(names):] + names[:index % len(names)]
        for name in order:
            fn, n = calls[name], counts[name]
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - started) * 1e3 / n)
            cpus.add(_cpu_now())
    return {"times": times, "calls_per_round": counts, "cpus": sorted(cpus)}


def one(task_path: str, cand_path: str, mode: str) -> dict:
    if mode == "pinned":
        allowed = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {allowed[len(allowed) // 2]})
    import torch
    import triton.testing as tt

    task, cand = _load(task_path, "task"), _load(cand_path, "cand")
    torch.manual_seed(0)
    init = task.get_init_inputs()
    ref = task.Model(*init).cuda()
    torch.manual_seed(0)
    new = cand.ModelNew(*init).cuda()
    inputs = [x.cuda() if torch.is_tensor(x) else x for x in task.get_inputs()]
    row: dict = {"task": task_path, "candidate": cand_path, "mode": mode, "pid": os.getpid(),
                 "affinity": sorted(os.sched_getaffinity(0))}
    with torch.no_grad():
        calls = {"eager": lambda: ref(*inputs), "cand": lambda: new(*inputs)}
        if mode == "compile":
            compiled = torch.compile(ref)
            more = [[x.cuda() if torch.is_tensor(x) else x for x in task.get_inputs()]
                    for _ in range(3)]

            class Four(torch.nn.Module):
                def __init__(self, inner):
                    super().__init__()
                    self.inner = inner

                def forward(self, a, b, c, d):
                    return self.inner(*a), self.inner(*b), self.inner(*c), self.inner(*d)

            four = torch.compile(Four(ref))
            started = time.perf_counter()
            compiled(*inputs)
            four(inputs, *more)
            torch.cuda.synchronize()
            row["compile_s"] = time.perf_counter() - started

            def noguard():
                with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
                    return compiled(*inputs)

            calls["compile"] = lambda: compiled(*inputs)
            calls["compile_noguard"] = noguard
            calls["compile_x4"] = lambda: four(inputs, *more)
        result = _rounds(calls)
        if mode == "compile":
            result["times"]["compile_x4"] = [t / 4 for t in result["times"]["compile_x4"]]
        row.update(result)
        row["do_bench_ms"] = {name: tt.do_bench(fn, warmup=25, rep=100)
                              for name, fn in calls.items()}
        if mode == "compile":
            row["do_bench_ms"]["compile_x4"] /= 4
    row["median_ms"] = {n: statistics.median(t) for n, t in row["times"].items()}
    return row


def machine() -> dict:
    facts: dict = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "nproc": os.cpu_count(),
                   "affinity": len(os.sched_getaffinity(0)), "loadavg": os.getloadavg()}
    try:
        mhz = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
               if line.startswith("cpu MHz")]
        facts["cpu_mhz"] = [min(mhz), statistics.median(mhz), max(mhz)] if mhz else None
        facts["model"] = next((line.split(":")[1].strip() for line in
                               Path("/proc/cpuinfo").read_text().splitlines()
                               if line.startswith("model name")), "")
    except OSError:
        pass
    for path in ("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
                 "/sys/fs/cgroup/cpu.max", "/proc/sys/kernel/randomize_va_space"):
        try:
            facts[path] = Path(path).read_text().strip()
        except OSError:
            facts[path] = None
    busy = subprocess.run(["ps", "-eo", "pcpu,comm", "--sort=-pcpu"], capture_output=True,
                          text=True).stdout.splitlines()[:6]
    facts["busiest"] = busy
    return facts


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if values else 0.0


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(one(*sys.argv[2:5])), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="compile,free,pinned",
                        help="which of compile, free, pinned to run")
    parser.add_argument("pairs", nargs="+")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    facts = {"start": machine()}
    rows = []
    pairs = list(zip(args.pairs[::2], args.pairs[1::2]))
    wanted = args.modes.split(",")
    modes = (["compile"] if "compile" in wanted else []) + [
        m for _ in range(args.runs) for m in ("free", "pinned") if m in wanted]
    with (out / "rows.jsonl").open("w") as sink:
        for mode in modes:
            for task, cand in pairs:
                done = subprocess.run([sys.executable, __file__, "--one", task, cand, mode], capture_output=True, text=True,
                                      timeout=300)
                line = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
                if not line:
                    print(f"{Path(task).name} {mode}: failed\n{done.stderr[-800:]}", flush=True)
                    continue
                row = json.loads(line[0])
                rows.append(row)
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                med = row["median_ms"]
                print(f"{mode:8} {Path(task).name[:40]:40} " + " ".join(
                    f"{n}={v:.4f}" for n, v in med.items()), flush=True)
    facts["end"] = machine()
    (out / "machine.json").write_text(json.dumps(facts, indent=1))
    print(json.dumps(facts))
    print("\n| task | mode | eager round spread | cand round spread | speedup per run "
          "(median of rounds) | between-run spread of speedup |")
    print("|---|---|---|---|---|---|")
    for task, _ in pairs:
        for mode in ("free", "pinned"):
            runs = [r for r in rows if r["task"] == task and r["mode"] == mode]
            if not runs:
                continue
            ups = [r["median_ms"]["eager"] / r["median_ms"]["cand"] for r in runs]
            er = statistics.median(spread(r["times"]["eager"]) for r in runs)
            cr = statistics.median(spread(r["times"]["cand"]) for r in runs)
            print(f"| {Path(task).stem[:36]} | {mode} | {er:.1%} | {cr:.1%} | "
                  f"{' '.join(f'{u:.2f}' for u in ups)} | {spread(ups):.1%} |")
    print("\n| task | eager | compile | noguard | x4 | gpu eager | gpu compile | gpu x4 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["mode"] != "compile":
            continue
        m, g = r["median_ms"], r["do_bench_ms"]
        print(f"| {Path(r['task']).stem[:36]} | {m['eager']:.4f} | {m['compile']:.4f} | "
              f"{m['compile_noguard']:.4f} | {m['compile_x4']:.4f} | {g['eager']:.4f} | "
              f"{g['compile']:.4f} | {g['compile_x4']:.4f} |")


if __name__ == "__main__":
    main()
