"""Where a worker's torch.compile baseline warm-up goes, and what AOTInductor would cost.

    python3 bench/compile_baseline.py --out DIR [TASK ...]

Each measurement runs in a fresh Python process that has imported torch and
torch._dynamo first (as the forkserver's children have) and initialised CUDA:

  compile    torch.compile(reference) and its first call: cold inductor
             cache, then warm, then warm under cProfile (top functions)
  aoti       torch.export + AOTInductor package built once; then, in a fresh
             process, the load + first call, and do_bench medians of eager,
             torch.compile and the AOTInductor package on the same inputs

Writes DIR/compile_baseline.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setup(task_path: str):
    import time

    import torch
    import torch._dynamo  # noqa: F401  (preloaded by the forkserver)

    sys.path.insert(0, str(ROOT / "src"))
    from kernelevo.evaluate import inputs as task_inputs

    task = task_inputs.import_source(Path(task_path).read_text(), "kernelevo_task",
                                     Path(tempfile.mkdtemp()))
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    model = task_inputs.build_model(task.Model, list(task.get_init_inputs()), "cuda",
                                    torch.float32)
    given = task_inputs.make_inputs(task, 0, "cuda", torch.float32)
    return time, torch, model, given


def child_compile(task_path: str, profiled: bool) -> dict:
    time, torch, model, given = _setup(task_path)
    started = time.perf_counter()
    import torch._inductor.compile_fx  # noqa: F401
    imported = time.perf_counter()
    profiler = None
    if profiled:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    compiled = torch.compile(model)
    with torch.no_grad():
        compiled(*given)
    torch.cuda.synchronize()
    if profiler:
        profiler.disable()
    ended = time.perf_counter()
    result = {"import_inductor_s": imported - started, "first_call_s": ended - imported,
              "total_s": ended - started}
    if profiler:
        import io
        import pstats
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(40)
        result["profile"] = text.getvalue().splitlines()[:70]
    return result


def child_aoti_build(task_path: str, package: str) -> dict:
    time, torch, model, given = _setup(task_path)
    started = time.perf_counter()
    with torch.no_grad():
        exported = torch.export.export(model, tuple(given))
        torch._inductor.aoti_compile_and_package(exported, package_path=package)
    return {"build_s": time.perf_counter() - started}


def child_aoti_load(task_path: str, package: str) -> dict:
    time, torch, model, given = _setup(task_path)
    started = time.perf_counter()
    loaded = torch._inductor.aoti_load_package(package)
    with torch.no_grad():
        got = loaded(*given)
    torch.cuda.synchronize()
    load_s = time.perf_counter() - started
    from triton.testing import do_bench
    compiled = torch.compile(model)
    with torch.no_grad():
        expected = model(*given)
        compiled(*given)
        medians = {name: do_bench(lambda fn=fn: fn(*given), warmup=100, rep=500,
                                  return_mode="median")
                   for name, fn in (("eager", model), ("compile", compiled), ("aoti", loaded))}
    got = got[0] if isinstance(got, (list, tuple)) else got
    return {"load_and_first_call_s": load_s, "median_ms": medians,
            "max_abs_diff_vs_eager": float((got - expected).abs().max())}


def _run_child(kind: str, *args: str, env: dict[str, str]) -> dict:
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); "
            f"import compile_baseline as c; print('RESULT', json.dumps(c.child_{kind}(*{args!r})))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=150)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 150 s"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": (done.stderr or done.stdout)[-3000:]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("tasks", nargs="*", default=["softmax", "gemm_bias_relu"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    steps = [("compile_cold", "compile", False), ("compile_warm", "compile", False),
             ("compile_warm_profiled", "compile", True), ("aoti_build", "aoti_build", None),
             ("aoti_load", "aoti_load", None)]
    for name in args.tasks:
        task_path = str(ROOT / "examples" / name / "task.py")
        cache = tempfile.mkdtemp()
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache,
               "TRITON_CACHE_DIR": f"{cache}/triton", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
        package = f"{cache}/{name}.pt2"
        for label, kind, extra in steps:
            argument = package if extra is None else extra
            row = results.setdefault(name, {})
            row[label] = _run_child(kind, task_path, argument, env=env)
            brief = {k: v for k, v in row[label].items() if k != "profile"}
            print(name, label, json.dumps(brief)[:800], flush=True)
            (args.out / "compile_baseline.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
