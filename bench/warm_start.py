"""Where a judging worker's warm-up goes, and what a fuller forkserver preload saves.

    PYTHONPATH=src python3 bench/warm_start.py --task examples/softmax/task.py --json OUT.json

A probe runs in a child of the judge's own forkserver (sandbox.run_job, as a
worker does): it imports the task, makes a CUDA context, builds the model
and inputs, runs eager once and torch.compile once (caches warm after the
first probe), and reports the seconds of each step and the modules that
the compile imported. Then the forkserver is started again with those
modules imported ahead too (none may initialise CUDA; bench/preload_extra.py
checks) and the probe runs again. Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))


def probe(payload: dict, channel) -> None:
    """Child: the worker's warm-up steps, timed; the modules the compile imported."""
    import torch

    from kernelevo.evaluate.shared import inputs as task_inputs

    steps = {"entered_at": time.time()}
    started = time.perf_counter()
    task = task_inputs.import_source(Path(payload["task"]).read_text(), "probe_task",
                                     Path(payload["scratch"]), str(Path(payload["task"]).parent))
    steps["task_import"] = time.perf_counter() - started
    started = time.perf_counter()
    device = payload["device"]
    if device == "cuda":
        torch.cuda.init()
    torch.empty(1, device=device)
    steps["cuda_init"] = time.perf_counter() - started
    started = time.perf_counter()
    model = task_inputs.build_model(task.Model, list(task.get_init_inputs()), device,
                                    torch.float32)
    inputs = task_inputs.make_inputs(task, 0, device, torch.float32)
    with torch.no_grad():
        model(*inputs)
    _sync(device)
    steps["model_inputs_eager"] = time.perf_counter() - started
    before = set(sys.modules)
    started = time.perf_counter()
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1
    compiled = torch.compile(model)
    with torch.no_grad():
        compiled(*inputs)
    _sync(device)
    steps["compile_first_call"] = time.perf_counter() - started
    started = time.perf_counter()
    with torch.no_grad():
        compiled(*inputs)
    _sync(device)
    steps["compile_second_call"] = time.perf_counter() - started
    new = sorted(set(sys.modules) - before)
    channel.send("probe", steps=steps, new_modules=new)


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def run_probes(count: int, task: Path, device: str) -> list[dict]:
    import warm_start
    from kernelevo.evaluate.sandbox.jobs import run_job

    rows = []
    for _ in range(count):
        scratch = Path(tempfile.mkdtemp(prefix="ke-probe-"))
        asked = time.time()
        result = run_job(warm_start.probe, {"task": str(task), "scratch": str(scratch),
                                            "device": device}, scratch,
                         300, 1 << 20, isolate_network=False)
        found = [m for m in result.messages if m.get("kind") == "probe"]
        if not found:
            raise SystemExit(f"probe failed (exit {result.exit_code}, signal {result.signal_name}, "
                             f"timed out {result.timed_out}): {result.log_tail[-2000:]}")
        row = found[0]
        row["steps"]["fork"] = row["steps"].pop("entered_at") - asked
        row["wall_s"] = result.wall_s
        rows.append(row)
        print({k: round(v, 3) for k, v in row["steps"].items()}, f"wall {result.wall_s:.2f}",
              f"{len(row['new_modules'])} modules imported by the compile", flush=True)
    return rows


def restart_forkserver(extra: list[str], warm: str = "") -> float:
    from multiprocessing import forkserver

    from kernelevo.evaluate.sandbox import jobs as sandbox

    forkserver._forkserver._stop()
    os.environ["KERNELEVO_BENCH_PRELOAD"] = ",".join(extra)
    os.environ["KERNELEVO_BENCH_WARM"] = warm
    sandbox._forkserver_context().set_forkserver_preload(
        ["kernelevo.evaluate.child.preload", "preload_extra"] if extra or warm else
        ["kernelevo.evaluate.child.preload"])
    started = time.perf_counter()
    sandbox._ensure_forkserver()
    # ensure_running returns before the preload ends: a trivial job waits for it
    import warm_start  # noqa: F401
    from kernelevo.evaluate.sandbox.jobs import run_job

    scratch = Path(tempfile.mkdtemp(prefix="ke-probe-"))
    run_job(warm_start._noop, {}, scratch, 300, 1 << 20, isolate_network=False)
    return time.perf_counter() - started


def _noop(payload: dict, channel) -> None:
    channel.send("noop")


def summary(rows: list[dict]) -> dict:
    keys = rows[0]["steps"]
    return {k: round(statistics.median(r["steps"][k] for r in rows), 3) for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", type=Path, default=ROOT / "examples" / "softmax" / "task.py")
    parser.add_argument("--probes", type=int, default=4)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of this script")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("TRITON_INTERPRET", "0")
    start_default = restart_forkserver([])
    print(f"forkserver start, default preload: {start_default:.2f} s", flush=True)
    plain = run_probes(args.probes, args.task, args.device)
    extra = sorted({m for r in plain[1:] for m in r["new_modules"]}
                   | {m for m in plain[0]["new_modules"]})
    result = {"task": str(args.task), "extra_modules": extra,
              "default": {"forkserver_start_s": round(start_default, 2),
                          "median": summary(plain[1:]), "rows": plain}}
    # A compile run in the forkserver itself (preload_extra's KERNELEVO_BENCH_WARM)
    # left its children hanging in their own first compile (CPU, 2026-12-01).
    for label, warm in (("more_modules", ""),):
        started = restart_forkserver(extra, warm)
        print(f"forkserver start, {label}: {started:.2f} s", flush=True)
        rows = run_probes(args.probes, args.task, args.device)
        result[label] = {"forkserver_start_s": round(started, 2), "median": summary(rows[1:]),
                         "still_imported": sorted({m for r in rows[1:]
                                                   for m in r["new_modules"]}),
                         "rows": rows}
    for label in ("default", "more_modules"):
        entry = result[label]
        print(label, entry["forkserver_start_s"], entry["median"],
              len(entry.get("still_imported", extra)), "modules imported by the compile")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
