"""Where the wall time of one evaluation goes: phases as the judge reports them.

    python bench/profile_eval.py TASK CANDIDATE [--times N]
"""

import argparse
import time

from kernelevo.candidate import load_candidate
from kernelevo.config import EvalConfig
from kernelevo.evaluate.judge import Judge
from kernelevo.task import load_task


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task")
    parser.add_argument("candidate")
    parser.add_argument("--times", type=int, default=2)
    args = parser.parse_args()
    marks = []
    judge = Judge(load_task(args.task), EvalConfig(),
                  progress=lambda phase: marks.append((time.perf_counter(), phase)))
    for _ in range(args.times):
        marks.clear()
        started = time.perf_counter()
        verdict = judge.evaluate(load_candidate(args.candidate))
        ended = time.perf_counter()
        previous, label = started, "start"
        steps = []
        for moment, phase in marks:
            steps.append(f"{label} {moment - previous:.2f}s")
            previous, label = moment, phase
        steps.append(f"{label} {ended - previous:.2f}s")
        print(f"{verdict.status} total {ended - started:.2f}s: " + " | ".join(steps))
        print("   phases", verdict.phases_s, "speedup", verdict.speedup_vs_eager)
        if not verdict.ok:
            print("   ", verdict.reason, verdict.message[:600])


if __name__ == "__main__":
    main()
