"""What a worker that compiled no baseline pays on a Triton candidate's first call (GPU machine).

The re-check at other sizes runs in a worker that times nothing, so it
compiles no torch.compile baseline; its first call of the softmax example
took 0.47-0.59 s against 0.06-0.09 s in the evaluation's worker, whose
baseline compile had run Triton kernels before (bench/RESULTS.md, session
16). Each trial here is a fresh process that imports torch, Triton and the
candidate, makes its CUDA context, then (by mode) does nothing more
(`plain`), sets Triton's driver up (`driver`), or launches a one-line Triton
kernel of its own first (`kernel`), and times the candidate's first and
second calls at the re-check's sizes (3585 x 14337). Triton's cache is warm
after the first trial, as in a search.

    PYTHONPATH=src python bench/first_call_cost.py --out DIR [--trials 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TRIAL = r'''
import importlib.util, json, sys, time
import torch, triton, triton.language as tl
mode = sys.argv[1]
spec = importlib.util.spec_from_file_location("cand", sys.argv[2])
cand = importlib.util.module_from_spec(spec); spec.loader.exec_module(cand)
torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
steps = {}
started = time.perf_counter()
if mode == "driver":
    from triton.runtime.driver import driver
    driver.active.get_current_target()
elif mode == "kernel":
    @triton.jit
    def _touch(x_ptr):
        tl.store(x_ptr, tl.load(x_ptr) + 1)
    x = torch.zeros(1, device="cuda")
    _touch[(1,)](x)
    torch.cuda.synchronize()
steps["warm_s"] = time.perf_counter() - started
model = cand.ModelNew().cuda()
x = torch.randn(3585, 14337, device="cuda")
for name in ("first_call_s", "second_call_s"):
    started = time.perf_counter()
    model(x)
    torch.cuda.synchronize()
    steps[name] = time.perf_counter() - started
print(json.dumps({"mode": mode, **{k: round(v, 4) for k, v in steps.items()}}))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    candidate = ROOT / "examples/softmax/triton_candidate.py"
    # Bytecode kept, so each trial's imports cost what a forkserver's child pays: none
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    environment.setdefault("PYTHONPYCACHEPREFIX", "/tmp/first_call_pycache")
    rows = []
    for trial in range(args.trials + 1):  # the first fills Triton's cache, and is marked so
        for mode in ("plain", "driver", "kernel"):
            done = subprocess.run([sys.executable, "-c", TRIAL, mode, str(candidate)],
                                  capture_output=True, text=True, timeout=300, env=environment)
            try:
                row = json.loads(done.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                row = {"mode": mode, "error": done.stderr[-500:]}
            row["trial"] = trial
            row["cache"] = "cold" if trial == 0 else "warm"
            rows.append(row)
            print(json.dumps(row), flush=True)
    (args.out / "first_call_cost.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
