"""Look closely at GPU fixtures whose verdict is in question.

    python3 bench/fixture_probe.py --out DIR [FIXTURE ...]

For each fixture: the judge's verdict with static checks off and a long time
limit, with the time each phase started; and, run directly in this process,
what the candidate computes against the reference over repeated calls and
which kernels the profiler sees in one call. Writes DIR/fixture_probe.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kernelevo.candidate import Candidate  # noqa: E402
from kernelevo.config import EvalConfig, TimingConfig  # noqa: E402
from kernelevo.evaluate import inputs as task_inputs  # noqa: E402
from kernelevo.evaluate.judge import Judge  # noqa: E402
from kernelevo.task import load_task  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
ENTRIES = {e["file"].removesuffix(".py"): e
           for e in tomllib.loads((FIXTURES / "manifest.toml").read_text())["fixture"]}


def judged(entry: dict, timeout_s: float) -> dict:
    marks: list[tuple[float, str]] = []
    started = time.perf_counter()
    judge = Judge(load_task(str(FIXTURES / "tasks" / entry["task"])),
                  EvalConfig(static_checks=False, vary_shapes=True, timeout_s=timeout_s,
                             timing=TimingConfig(baselines=("eager",))),
                  progress=lambda phase: marks.append((time.perf_counter() - started, phase)))
    source = (FIXTURES / "candidates" / entry["file"]).read_text()
    verdict = judge.evaluate(Candidate(source=source, backend=entry["backend"], name=entry["file"]))
    return {"status": verdict.status, "reason": verdict.reason, "message": verdict.message[:800],
            "phases_s": verdict.phases_s, "marks": [(round(t, 2), p) for t, p in marks],
            "wall_s": time.perf_counter() - started, "logs": verdict.logs[-1500:]}


def direct(entry: dict, calls: int = 50) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    folder = Path(tempfile.mkdtemp())
    task = task_inputs.import_source((FIXTURES / "tasks" / entry["task"]).read_text(),
                                     "probe_task", folder)
    module = task_inputs.import_source((FIXTURES / "candidates" / entry["file"]).read_text(),
                                       "probe_candidate", folder)
    reference = task_inputs.build_model(task.Model, list(task.get_init_inputs()), "cuda",
                                        torch.float32)
    model = task_inputs.build_model(module.ModelNew, list(task.get_init_inputs()), "cuda",
                                    torch.float32)
    given = task_inputs.make_inputs(task, 1, "cuda", torch.float32)
    with torch.no_grad():
        expected = reference(*given)
        wrong, worst = 0, 0.0
        started = time.perf_counter()
        for _ in range(calls):
            got = model(*given)
            torch.cuda.synchronize()
            error = float((got - expected).abs().max())
            worst = max(worst, error)
            wrong += error > 1e-3
        per_call_ms = (time.perf_counter() - started) / calls * 1e3
        seen = {}
        for activities in ([ProfilerActivity.CUDA], [ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            with profile(activities=activities) as prof:
                model(*given)
                torch.cuda.synchronize()
            label = "+".join(a.name for a in activities)
            seen[label] = {e.key[:80]: getattr(e, "device_time_total", 0.0)
                           for e in prof.key_averages()
                           if getattr(e, "device_time_total", 0.0) > 0}
    return {"calls": calls, "wrong_calls": wrong, "worst_abs_error": worst,
            "per_call_ms": per_call_ms, "profiler_kernels": seen}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("fixtures", nargs="*", default=["race_reduction", "side_stream"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in args.fixtures:
        entry = ENTRIES[name]
        results[name] = {"direct": direct(entry), "judged": judged(entry, args.timeout)}
        brief = {k: v for k, v in results[name]["judged"].items() if k != "logs"}
        print(name, json.dumps({"direct": results[name]["direct"], "judged": brief})[:2500],
              flush=True)
        (args.out / "fixture_probe.json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
