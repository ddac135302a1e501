"""Where a cold `kernelevo eval` spends its time: imports, the forkserver, the judge.

    KERNELEVO_CACHE_DIR=/tmp/ke-cache PYTHONPATH=src python bench/cold_start.py --out DIR

Each figure is a fresh process, twice (OS page cache warm after the first):
`import torch`; the forkserver's preload (torch, dynamo, inductor, Triton
and inductor's cache keys); `kernelevo eval --local --json` of the softmax
example's Triton candidate (both baselines) with its verdict's phases.
Writes DIR/cold_start.json and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _wall(command: list[str], env: dict) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    return time.perf_counter() - started, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TRITON_INTERPRET="0")
    python = sys.executable
    result: dict = {}
    for name, code in (("import_torch", "import torch"),
                       ("import_torch_cuda_init", "import torch; torch.zeros(1, device='cuda')"),
                       ("forkserver_preload", "import kernelevo.evaluate.preload")):
        result[name] = [round(_wall([python, "-c", code], env)[0], 2) for _ in range(2)]
        print(name, result[name], flush=True)
    evals = []
    for _ in range(2):
        wall, out = _wall([python, "-m", "kernelevo.cli.app", "eval", "--local", "--json",
                           str(ROOT / "examples/softmax/task.py"),
                           str(ROOT / "examples/softmax/triton_candidate.py")], env)
        try:
            phases = json.loads(out)["phases_s"]
        except (ValueError, KeyError):
            phases = {"unreadable": out[-300:]}
        evals.append({"wall_s": round(wall, 2), "phases": phases})
        print("eval", evals[-1], flush=True)
    result["eval_local"] = evals
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cold_start.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
