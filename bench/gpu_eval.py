"""GPU benchmark of the evaluator: verdicts, wall-time split, timing stability, do_bench agreement.

    KERNELEVO_CACHE_DIR=/tmp/ke-cache python3 bench/gpu_eval.py --out DIR

Steps (each writes its JSON to DIR as soon as it is done):
  prebuild   every CUDA candidate (examples and fixtures) built at once, cold
  examples   every example candidate judged: Triton twice (cold, then warm
             compile cache), CUDA once (build cached); wall time split by phase
  stability  the same kernel judged five times: spread of the medians
  do_bench   triton.testing.do_bench (with its L2 flush) against our median
  overhead   warm evaluations (Triton and CUDA) with and without the torch.compile baseline
  prebuild_fixtures   like prebuild, for the fixtures' CUDA candidates only
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
EXAMPLES = ["gelu", "softmax", "layernorm", "gemm_bias_relu", "row_sum", "mse_loss"]
STABILITY = ["softmax", "layernorm", "gemm_bias_relu"]


def _judge(task_path: str, **config):
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.parent.judge import Judge
    from kernelevo.task import load_task

    return Judge(load_task(task_path), EvalConfig(**config))


def _candidate(path: Path):
    from kernelevo.candidate import load_candidate

    return load_candidate(path)


def _summary(verdict, wall_s: float) -> dict:
    timed_ms = sum(t.median_ms * t.samples for t in verdict.timings.values() if t)
    return {
        "status": verdict.status, "reason": verdict.reason, "message": verdict.message[:300],
        "wall_s": round(wall_s, 3), "phases_s": verdict.phases_s,
        "timed_gpu_work_s": round(timed_ms / 1e3, 3),
        "overhead_s": round(wall_s - timed_ms / 1e3, 3),
        "median_ms": {k: v.median_ms for k, v in verdict.timings.items() if v},
        "iqr_ms": {k: v.iqr_ms for k, v in verdict.timings.items() if v},
        "speedup_vs_eager": verdict.speedup_vs_eager,
        "speedup_vs_compile": verdict.speedup_vs_compile,
        "notes": list(verdict.notes), "flags": list(verdict.flags),
    }


def prebuild(out: Path, examples_too: bool = True) -> None:
    """Build every CUDA candidate concurrently (correctness only), recording cold build times."""
    pairs = [(f"examples/{n}/task.py", f"examples/{n}/cuda_candidate.py") for n in EXAMPLES
             if examples_too]
    fixtures = ROOT / "tests/fixtures"
    import tomllib

    for entry in tomllib.loads((fixtures / "manifest.toml").read_text())["fixture"]:
        if entry["backend"] == "cuda":
            pairs.append((f"tests/fixtures/tasks/{entry['task']}",
                          f"tests/fixtures/candidates/{entry['file']}"))
    code = ("import json, sys, time; sys.path.insert(0, 'bench'); import gpu_eval as g\n"
            "if __name__ == '__main__':\n"
            "    s = time.perf_counter(); j = g._judge(sys.argv[1], time_candidates=False,"
            " static_checks=False)\n"
            "    v = j.evaluate(g._candidate(g.Path(sys.argv[2])))\n"
            "    print(json.dumps(g._summary(v, time.perf_counter() - s)))\n")
    started = time.perf_counter()
    processes = [(pair, subprocess.Popen([sys.executable, "-c", code, *pair], cwd=ROOT,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         text=True)) for pair in pairs]
    results = {}
    for (task, candidate), process in processes:
        stdout, _ = process.communicate(timeout=900)
        lines = stdout.strip().splitlines()
        results[candidate] = json.loads(lines[-1]) if lines else {"status": "no output"}
    name = "prebuild" if examples_too else "prebuild_fixtures"
    _write(out, name, {"wall_s": time.perf_counter() - started, "builds": results})


def examples(out: Path) -> None:
    results = {}
    for name in EXAMPLES:
        judge = _judge(f"examples/{name}/task.py")
        for kind, runs in (("triton", 2), ("cuda", 1)):
            path = ROOT / f"examples/{name}/{kind}_candidate.py"
            for run in range(runs):
                started = time.perf_counter()
                verdict = judge.evaluate(_candidate(path))
                key = f"{name}/{kind}" + ("" if runs == 1 else ("/cold" if run == 0 else "/warm"))
                results[key] = _summary(verdict, time.perf_counter() - started)
                print(key, results[key]["status"], results[key]["reason"],
                      results[key]["median_ms"].get("candidate"), flush=True)
        _write(out, "examples", results)


def overhead(out: Path) -> None:
    """Warm evaluations with and without the torch.compile baseline."""
    from kernelevo.config import TimingConfig

    results = {}
    for name in ("softmax", "gemm_bias_relu"):
        for label, baselines in (("eager+compile", ("eager", "compile")), ("eager", ("eager",))):
            judge = _judge(f"examples/{name}/task.py", timing=TimingConfig(baselines=baselines))
            # Run 0 may pay cold caches (a CUDA build unless prebuilt); run 1 is warm.
            for backend in ("triton", "cuda"):
                path = ROOT / f"examples/{name}/{backend}_candidate.py"
                for run in range(2):
                    started = time.perf_counter()
                    verdict = judge.evaluate(_candidate(path))
                    key = f"{name}/{backend}/{label}/{run}"
                    results[key] = _summary(verdict, time.perf_counter() - started)
        _write(out, "overhead", results)
    for key, value in results.items():
        print(key, value["status"], value["wall_s"], value["overhead_s"], value["phases_s"])


def stability(out: Path) -> None:
    from kernelevo.config import TimingConfig

    results = {}
    for name in STABILITY:
        judge = _judge(f"examples/{name}/task.py", timing=TimingConfig(baselines=("eager",)))
        candidate = _candidate(ROOT / f"examples/{name}/triton_candidate.py")
        medians = []
        for _ in range(5):
            verdict = judge.evaluate(candidate)
            if verdict.ok:
                medians.append(verdict.timings["candidate"].median_ms)
        spread = (max(medians) - min(medians)) / statistics.median(medians) if medians else None
        results[name] = {"medians_ms": medians, "spread_of_medians": spread}
        print(name, medians, spread, flush=True)
        _write(out, "stability", results)


def do_bench(out: Path) -> None:
    """Our median against triton.testing.do_bench's on the same candidate and sizes."""
    import torch
    import triton

    from kernelevo.evaluate.shared import inputs as task_inputs

    import tempfile

    stable = json.loads((out / "stability.json").read_text())
    modules = Path(tempfile.mkdtemp())
    results = {}
    for name in STABILITY:
        folder = ROOT / "examples" / name
        task = task_inputs.import_source((folder / "task.py").read_text(), f"t_{name}", modules)
        module = task_inputs.import_source((folder / "triton_candidate.py").read_text(),
                                           f"c_{name}", modules)
        model = task_inputs.build_model(module.ModelNew, list(task.get_init_inputs()), "cuda",
                                        torch.float32)
        args = task_inputs.make_inputs(task, 1, "cuda", torch.float32)
        with torch.no_grad():
            reference_ms = triton.testing.do_bench(lambda: model(*args), warmup=100, rep=500,
                                                   return_mode="median")
        medians = stable.get(name, {}).get("medians_ms") or []
        mine = statistics.median(medians) if medians else None
        results[name] = {"do_bench_ms": reference_ms, "kernelevo_ms": mine,
                         "difference": (mine - reference_ms) / reference_ms if mine else None}
        print(name, results[name], flush=True)
    _write(out, "do_bench", results)


def _write(out: Path, name: str, data: dict) -> None:
    (out / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("steps", nargs="*", default=["prebuild", "examples", "stability",
                                                     "do_bench"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    steps = {"prebuild": prebuild, "examples": examples, "stability": stability,
             "do_bench": do_bench, "overhead": overhead,
             "prebuild_fixtures": lambda out: prebuild(out, examples_too=False)}
    for step in args.steps:
        started = time.perf_counter()
        steps[step](args.out)
        print(f"== {step} done in {time.perf_counter() - started:.1f}s", flush=True)


if __name__ == "__main__":
    main()
