"""What each timing measure means, checked against independent timers on a GPU.

    KERNELEVO_CACHE_DIR=/tmp/ke-cache python3 bench/timing_semantics.py --out DIR

For example kernels at their own sizes and at launch-bound sizes, the judge's
three measures (GPU time, call time, KernelBench time) are set beside timers
run in this process, outside the judge:
  do_bench   triton.testing.do_bench, median (L2 flushed before each call)
  loop       host time per call of a back-to-back loop, synchronised at the end
  kb_event   KernelBench's cuda_event protocol (256 MB clear, events, mean)
  kernels    the profiler's summed kernel time of one call (no launch gaps),
             taken last: the profiler slows every later launch in a process
Each row gives candidate and eager times and the agreement of our measure with
its counterpart: GPU time ~ do_bench, call time ~ loop, KernelBench ~ kb_event.
Writes DIR/timing_semantics.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

# (example, size changes): own sizes, and sizes where a call is a few microseconds.
CASES = [
    ("row_sum", {}), ("row_sum", {"batch_size": 128, "dim": 512}),
    ("softmax", {}), ("softmax", {"batch_size": 64, "dim": 1024}),
    ("gelu", {}), ("gelu", {"batch_size": 16, "dim": 1024}),
    ("layernorm", {"batch_size": 256, "dim": 1024}),
    ("mse_loss", {"batch_size": 64, "dim": 512}),
]


def independent_times(task, candidate_path: Path) -> dict[str, dict[str, float]]:
    """do_bench, loop and KernelBench-style times of ModelNew and Model, in this process."""
    import torch
    import triton.testing

    from kernelevo.evaluate.inputs import build_model, import_source, make_inputs

    folder = Path("/tmp/ke-timing-semantics")
    folder.mkdir(exist_ok=True)
    module = import_source(task.source, f"probe_task_{abs(hash(task.source))}", folder)
    cand = import_source(candidate_path.read_text(), f"probe_cand_{abs(hash(task.source))}",
                         folder)
    inputs = make_inputs(module, 1, "cuda", torch.float32)
    models = {"candidate": build_model(cand.ModelNew, list(module.get_init_inputs()), "cuda",
                                       torch.float32),
              "eager": build_model(module.Model, list(module.get_init_inputs()), "cuda",
                                   torch.float32)}
    out = {}
    with torch.no_grad():
        for name, model in models.items():
            call = lambda model=model: model(*inputs)  # noqa: E731
            out[name] = {"do_bench": triton.testing.do_bench(call, return_mode="median"),
                         "loop": _loop(call), "kb_event": _kb_event(call)}
        for name, model in models.items():
            out[name]["kernels"] = _kernel_ms(lambda model=model: model(*inputs))
    return out


def _kernel_ms(call, calls: int = 20) -> float:
    """Summed device time of the kernels of one call, by the profiler (median of calls)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    per_call = []
    for _ in range(calls):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        per_call.append(sum(e.device_time_total for e in prof.key_averages()) / 1e3)
    return statistics.median(per_call)


def _loop(call, repeats: int = 7) -> float:
    import torch

    call()
    torch.cuda.synchronize()
    started = time.perf_counter()
    call()
    torch.cuda.synchronize()
    calls = max(10, int(0.02 / max(time.perf_counter() - started, 1e-6)))
    results = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        results.append((time.perf_counter() - started) * 1e3 / calls)
    return statistics.median(results)


def _kb_event(call, trials: int = 100) -> float:
    import torch

    for _ in range(3):
        call()
        torch.cuda.synchronize()
    times = []
    for trial in range(trials + 1):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dummy = torch.empty((32, 1024, 1024), dtype=torch.int64, device="cuda")
        dummy.fill_(42)
        del dummy
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        if trial:
            times.append(start.elapsed_time(end))
    return statistics.fmean(times)


def judged_times(task, candidate_path: Path) -> dict:
    from kernelevo.candidate import load_candidate
    from kernelevo.config import EvalConfig, TimingConfig
    from kernelevo.evaluate.judge import Judge

    config = EvalConfig(timing=TimingConfig(baselines=("eager",), measure="kernelbench"))
    verdict = Judge(task, config).evaluate(load_candidate(candidate_path))
    if not verdict.ok:
        return {"reason": verdict.reason, "message": verdict.message[:300]}
    measures = {m: {name: (s.mean_ms if m == "kernelbench" else s.median_ms)
                    for name, s in stats.items()} for m, stats in verdict.measures.items()}
    spread = {m: {name: {"iqr_ms": s.iqr_ms, "samples": s.samples} for name, s in stats.items()}
              for m, stats in verdict.measures.items()}
    return {"reason": verdict.reason, "measures": measures, "spread": spread,
            "notes": [n for n in verdict.notes if "stress set" in n]}


def _case(example: str, changes: dict):
    from kernelevo.task import load_task

    task = load_task(str(ROOT / "examples" / example / "task.py"))
    return (task.with_constants(changes) if changes else task,
            ROOT / "examples" / example / "triton_candidate.py")


def run_case(example: str, changes: dict) -> dict:
    task, candidate = _case(example, changes)
    row = {"example": example, "sizes": changes or "own", **judged_times(task, candidate)}
    if "measures" in row:
        # A fresh process each: the profiler, once used, slows every later launch.
        done = subprocess.run([sys.executable, __file__, "--independent", example,
                               json.dumps(changes)], capture_output=True, text=True,
                              timeout=300)
        row["independent"] = json.loads(done.stdout.strip().splitlines()[-1])
        row["agreement"] = _agreement(row["measures"], row["independent"])
    return row


_PAIRS = {"gpu": "do_bench", "call": "loop", "kernelbench": "kb_event"}


def _agreement(ours: dict, theirs: dict) -> dict:
    """Our time over the independent timer's, per measure and contestant, and speedups."""
    result = {}
    for measure, other in _PAIRS.items():
        for name in ("candidate", "eager"):
            result[f"{measure}_{name}_ratio"] = ours[measure][name] / theirs[name][other]
        result[f"{measure}_speedup"] = ours[measure]["eager"] / ours[measure]["candidate"]
        result[f"{other}_speedup"] = theirs["eager"][other] / theirs["candidate"][other]
    result["kernels_speedup"] = theirs["eager"]["kernels"] / theirs["candidate"]["kernels"]
    result["gpu_candidate_over_kernels"] = ours["gpu"]["candidate"] / theirs["candidate"]["kernels"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--independent", nargs=2, metavar=("EXAMPLE", "SIZES_JSON"),
                        help="(internal) print the independent timers of one case as JSON")
    args = parser.parse_args()
    if args.independent:
        print(json.dumps(independent_times(*_case(args.independent[0],
                                                  json.loads(args.independent[1])))))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for example, changes in CASES:
        rows.append(run_case(example, changes))
        (args.out / "timing_semantics.json").write_text(json.dumps(rows, indent=1))
    print(f"{'case':34} {'gpu/do_bench':>13} {'call/loop':>10} {'kb/kb':>8}   speedups "
          "gpu|do_bench|kernels call|loop kb|kb_event")
    for row in rows:
        name = f"{row['example']} {row['sizes']}"[:34]
        if "agreement" not in row:
            print(f"{name:34} {row['reason']}: {row.get('message', '')[:80]}")
            continue
        a = row["agreement"]
        print(f"{name:34} {a['gpu_candidate_ratio']:13.3f} {a['call_candidate_ratio']:10.3f} "
              f"{a['kernelbench_candidate_ratio']:8.3f}   {a['gpu_speedup']:.2f}|"
              f"{a['do_bench_speedup']:.2f}|{a['kernels_speedup']:.2f} "
              f"{a['call_speedup']:.2f}|{a['loop_speedup']:.2f} "
              f"{a['kernelbench_speedup']:.2f}|{a['kb_event_speedup']:.2f}")
    print("GPU-time IQR, % of the median (samples): candidate, eager; stress-set notes")
    for row in rows:
        if "spread" in row:
            gpu, med = row["spread"]["gpu"], row["measures"]["gpu"]
            cells = ", ".join(f"{100 * gpu[n]['iqr_ms'] / med[n]:.1f} % ({gpu[n]['samples']})"
                              for n in ("candidate", "eager"))
            print(f"{row['example']} {row['sizes']}"[:34].ljust(34), cells, row["notes"])


if __name__ == "__main__":
    main()
