"""Why the judge's worker takes three times as long per GPU sample as a plain process (GPU machine).

Session 16: the softmax example's timing phase took 0.62-0.68 s in the
judge's worker (about 2 ms per GPU sample) against 0.28-0.30 s for the same
contestants in a plain process (0.52-0.58 ms; bench/timing_phase_cost.py).
This judges the example's candidate several times with one judge per
variant and prints each verdict's timing steps, so the variants tell the
causes apart:

- `service`: standby on, as `serve` runs (the next job's processes start,
  and make their CUDA contexts, during this job's timing);
- `no_standby`: nothing starts beside the evaluation;
- `no_standby_unconfined`: the same with the sandbox's confinement off
  (KERNELEVO_CONFINE=0, read when each child starts);
- `no_standby_no_recheck`: no re-check at other sizes beside it either.

    PYTHONPATH=src KERNELEVO_CACHE_DIR=/tmp/ke-cache python bench/worker_timing_cost.py \\
        --out DIR [--jobs 4] [--pause 4] [--variants service ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

VARIANTS = {"service": {"standby": True},
            "no_standby": {"standby": False},
            "no_standby_unconfined": {"standby": False, "confine": "0"},
            "no_standby_no_recheck": {"standby": False, "vary_shapes": False}}
STEPS = ("total", "timing", "timing_warm", "timing_gpu", "timing_call", "timing_probe",
         "gate_wait", "correctness", "profile")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--pause", type=float, default=4.0)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    from kernelevo.candidate import load_candidate
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.judge import Judge
    from kernelevo.task import load_task

    task = load_task(str(ROOT / "examples/softmax/task.py"))
    candidate = load_candidate(ROOT / "examples/softmax/triton_candidate.py")
    rows = []
    for name in args.variants:
        variant = VARIANTS[name]
        if "confine" in variant:
            os.environ["KERNELEVO_CONFINE"] = variant["confine"]
        else:
            os.environ.pop("KERNELEVO_CONFINE", None)
        judge = Judge(task, EvalConfig(vary_shapes=variant.get("vary_shapes", True)),
                      standby=variant["standby"])
        try:
            for job in range(args.jobs):
                if job:
                    time.sleep(args.pause)
                started = time.perf_counter()
                verdict = judge.evaluate(candidate)
                row = {"variant": name, "job": job, "reason": verdict.reason,
                       "wall_s": round(time.perf_counter() - started, 3),
                       "baselines": verdict.environment.get("baselines"),
                       "gpu_samples": verdict.measures.get("gpu", {}).get("candidate").samples
                       if verdict.measures.get("gpu") else None,
                       **{k: verdict.phases_s.get(k) for k in STEPS if k in verdict.phases_s}}
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            judge.close()
    (args.out / "worker_timing_cost.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
