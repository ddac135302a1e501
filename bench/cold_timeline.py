"""When each step of a cold `eval --local` happens, from the process's start.

    KERNELEVO_CACHE_DIR=/tmp/ke-cache PYTHONPATH=src python bench/cold_timeline.py [--out FILE]

Does what `kernelevo eval TASK CANDIDATE --local` does (bytecode kept, the
forkserver started before torch is imported, then a Judge in this process)
for the softmax example's Triton candidate, and prints the moment of every
step: this process's imports, the judge's start, each progress report of the
oracle and the worker, the verdict. The verdict's own phases follow.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
MARKS: list[tuple[float, str]] = []


def mark(label: str) -> None:
    MARKS.append((time.perf_counter() - STARTED, label))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from kernelevo.cache_dir import keep_bytecode

    keep_bytecode()
    from kernelevo.evaluate.sandbox.jobs import start_forkserver

    start_forkserver(False)
    mark("forkserver asked for")
    import torch  # noqa: F401

    mark("torch imported")
    from kernelevo.candidate import load_candidate
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.parent.judge import Judge
    from kernelevo.task import load_task

    mark("kernelevo imported")
    task = load_task(str(ROOT / "examples" / "softmax" / "task.py"))
    candidate = load_candidate(ROOT / "examples" / "softmax" / "triton_candidate.py")
    judge = Judge(task, EvalConfig(), progress=mark)
    mark("judge made")
    verdict = judge.evaluate(candidate)
    mark(f"verdict {verdict.reason}")
    previous = 0.0
    for moment, label in MARKS:
        print(f"{moment:7.2f} s  (+{moment - previous:5.2f})  {label}")
        previous = moment
    print("phases", json.dumps({k: round(v, 3) for k, v in verdict.phases_s.items()}))
    if args.out:
        args.out.write_text(json.dumps({"marks": MARKS, "phases": verdict.phases_s}, indent=1))


if __name__ == "__main__":
    main()
