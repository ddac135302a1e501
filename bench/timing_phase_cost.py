"""Where a warm evaluation's timing phase goes, sample by sample (GPU machine, plain process).

The timing phase of the softmax example took 0.62-0.68 s with stored
baselines (the candidate's 200 GPU samples and 30 call loops, a 20-sample
probe beside them) and 0.75-1.22 s with every baseline beside it, of which
the candidate's own timed work is 0.046 s. This times the same phase in one
plain process, the GPU idle for `--idle` seconds before each run (as between
a search's jobs) or busy right before it, and records every GPU sample's
host time, so a slow start (clocks rising after idle) shows apart from the
per-sample cost. It also reads the SM clock before and after (nvidia-smi).

    PYTHONPATH=src python bench/timing_phase_cost.py --out DIR [--idle 4] [--runs 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def _clock() -> str:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,pstate",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        return done.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--idle", type=float, default=4.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import torch

    from kernelevo.config import TimingConfig
    from kernelevo.evaluate import inputs as task_inputs
    from kernelevo.evaluate import timing

    task = _module(ROOT / "examples/softmax/task.py", "softmax_task")
    candidate = _module(ROOT / "examples/softmax/triton_candidate.py", "softmax_candidate")
    device, dtype = "cuda", torch.float32
    eager = task_inputs.build_model(task.Model, [], device, dtype)
    mine = candidate.ModelNew().to(device)
    sets = [task_inputs.make_inputs(task, seed, device, dtype) for seed in (1, 2, 3)]
    config = TimingConfig()

    # Every GPU sample's host time, in order, by wrapping the sampler's sample().
    sample_s: list[float] = []
    original = timing._Sampler.sample

    def recorded(self, call, set_index, hold_ms):
        started = time.perf_counter()
        result = original(self, call, set_index, hold_ms)
        sample_s.append(time.perf_counter() - started)
        return result

    timing._Sampler.sample = recorded
    rows = []
    layouts = {"stored": ({"candidate_0": mine, "eager": eager}, {"eager": (20, 5)}),
               "beside": ({"eager": eager, "candidate_0": mine}, None)}
    for run in range(args.runs):
        for layout, (contestants, brief) in layouts.items():
            for before in ("idle", "busy"):
                if before == "idle":
                    torch.cuda.synchronize()
                    time.sleep(args.idle)
                else:  # the GPU busy right up to the timing, as after a correctness phase
                    x = sets[0][0]
                    until = time.perf_counter() + 0.5
                    while time.perf_counter() < until:
                        torch.softmax(x, dim=-1)
                    torch.cuda.synchronize()
                clock_before = _clock()
                sample_s.clear()
                started = time.perf_counter()
                with torch.no_grad():
                    result = timing.time_contestants(dict(contestants), sets, config,
                                                     lambda *_: None, [0, 1], brief=brief)
                wall = time.perf_counter() - started
                per = list(sample_s)
                row = {"run": run, "layout": layout, "before": before, "wall_s": round(wall, 4),
                       "seconds": {k: round(v, 4) for k, v in result.seconds.items()},
                       "gpu_samples": len(per),
                       "sample_ms_first10": [round(s * 1e3, 3) for s in per[:10]],
                       "sample_ms_median": round(statistics.median(per) * 1e3, 3),
                       "sample_ms_last50_median": round(statistics.median(per[-50:]) * 1e3, 3),
                       "medians_ms": {m: {n: round(s.median_ms, 4) for n, s in by.items()}
                                      for m, by in result.measures.items()},
                       "clock_before": clock_before, "clock_after": _clock()}
                rows.append(row)
                print(json.dumps(row), flush=True)
    (args.out / "timing_phase_cost.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
