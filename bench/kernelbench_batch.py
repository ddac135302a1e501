"""KernelBench level-1 corpus on one GPU, in one call: verdicts and every timer side by side.

    KERNELEVO_CACHE_DIR=/tmp/ke-cache PYTHONPATH=src python3 bench/kernelbench_batch.py \\
        --kb .kb --out DIR [--max-elements 16777216] [--only 19 23 ...]

The corpus is bench/kernelbench/manifest.toml (honest Triton kernels and bad
variants for KernelBench level-1 problems). Each problem is shrunk first, the
same way for every harness, until its inputs hold at most --max-elements
values (KernelBench's own level-1 sizes reach 6.4 GB per input, minutes per
problem in KernelBench's harness); the shrunk problem files are written to
DIR/problems so any result can be re-run. Three phases, each writing JSON
lines as it goes so a killed run keeps what finished:
  judge        this project's verdict of every entry (in this process, the
               forkserver warm), with --timing kernelbench: GPU, call and
               KernelBench times of candidate and eager
  timers       one fresh process: triton.testing.do_bench (median) and a
               back-to-back loop of calls, candidate and eager, honest entries
  kernelbench  one fresh process: KernelBench's eval_kernel_against_ref
               (bench/kb_harness.py's call: 5 correctness trials, 100 timed
               trials, cuda_event timing), honest entries
Then DIR/kernelbench_batch.json and a markdown table DIR/kernelbench_batch.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))
MANIFEST = ROOT / "bench" / "kernelbench" / "manifest.toml"
CANDIDATES = ROOT / "bench" / "kernelbench" / "candidates"


def load_entries(only: list[str] | None, honest_triton: bool = False,
                 forward_only: bool = False) -> list[dict]:
    """The manifest's entries; `forward_only` leaves out those judged with --backward
    (a suite of KernelBench tasks judges forwards: a bad backward would pass there)."""
    entries = tomllib.loads(MANIFEST.read_text())["candidate"]
    if forward_only:
        entries = [e for e in entries if "--backward" not in e.get("eval_args", [])]
    if only:
        entries = [e for e in entries if e["problem"] in only or e["file"] in only
                   or (e["problem"].startswith("level1/") and e["problem"].split("/")[-1] in only)]
    if honest_triton:  # the timers build no CUDA extension (a cold build each)
        entries = [e for e in entries
                   if e["kind"] == "honest" and e.get("backend", "triton") == "triton"]
    return entries


# A manifest entry's eval_args (flags of `kernelevo eval`) as the settings they give.
FLAG_SETTINGS = {"--backward": {"backward": True}, "--vary-shapes": {"vary_shapes": True}}


def entry_config(config, entry: dict):
    """`config` with the settings the entry's verdict needs (its eval_args)."""
    changes: dict = {}
    for flag in entry.get("eval_args", []):
        if flag not in FLAG_SETTINGS:
            raise SystemExit(f"{entry['file']}: eval_args {flag!r} has no setting here: add it "
                             "to kernelbench_batch.FLAG_SETTINGS")
        changes.update(FLAG_SETTINGS[flag])
    return config.evolve(**changes)


def input_elements(task) -> int:
    from kernelevo.suite.shrink import input_elements as count

    return count(task)


def shrunk(task, max_elements: int):
    """The task with its largest size constants halved until its inputs fit."""
    from kernelevo.suite.shrink import shrink_to

    return shrink_to(task, max_elements)


def prepare(entries: list[dict], kb: Path, out: Path, max_elements: int) -> dict[str, dict]:
    """Shrunk problem files, one per problem, under out/problems."""
    from kernelevo.task import load_task

    folder = out / "problems"
    folder.mkdir(parents=True, exist_ok=True)
    problems = {}
    for problem in sorted({e["problem"] for e in entries}):
        task = load_task(f"kernelbench:{problem}", str(kb))
        small, changes = shrunk(task, max_elements)
        path = folder / f"{problem.replace('/', '_')}.py"
        path.write_text(small.source)
        problems[problem] = {"path": str(path), "changes": changes,
                             "elements": input_elements(small)}
    return problems


def judge_phase(entries: list[dict], problems: dict, log: Path) -> list[dict]:
    from kernelevo.candidate import load_candidate
    from kernelevo.config import EvalConfig, TimingConfig
    from kernelevo.evaluate.parent.judge import Judge
    from kernelevo.task import load_task

    # Every measure (kernelbench adds KernelBench's protocol to gpu and call);
    # shapes are not varied: this is about timing.
    config = EvalConfig(timeout_s=120.0, vary_shapes=False, timing=TimingConfig(
        baselines=("eager",), measure="kernelbench", target_ms=150.0, call_target_ms=60.0))
    rows = []
    for entry in entries:
        started = time.perf_counter()
        task = load_task(problems[entry["problem"]]["path"])
        try:
            verdict = Judge(task, entry_config(config, entry)).evaluate(
                load_candidate(CANDIDATES / entry["file"]))
            row = {"reason": verdict.reason, "message": verdict.message[:300],
                   "measures": {m: {n: {"median_ms": s.median_ms, "mean_ms": s.mean_ms}
                                    for n, s in stats.items()}
                                for m, stats in verdict.measures.items()},
                   "baselines": verdict.environment.get("baselines"),
                   "drift_note": next((n for n in verdict.notes if "drift" in n), None)}
        except Exception as exc:  # a task the judge cannot run is a row, not the end
            row = {"reason": "judge_error", "message": f"{type(exc).__name__}: {exc}"[:300]}
        row.update(file=entry["file"], problem=entry["problem"], kind=entry["kind"],
                   expected=entry["expect_reasons"], wall_s=round(time.perf_counter() - started, 2))
        row["right"] = row["reason"] in entry["expect_reasons"]
        rows.append(row)
        _append(log, row)
        print(f"judge {entry['file']:46} {row['reason']:24} {'ok' if row['right'] else 'WRONG'}"
              f" {row['wall_s']:.1f}s", flush=True)
    return rows


def _append(log: Path, row: dict) -> None:
    with log.open("a") as handle:
        handle.write(json.dumps(row) + "\n")


def run_child(phase: str, items: list[dict], out: Path, extra: list[str],
              timeout_s: float) -> list[dict]:
    """A fresh process that runs one phase over items and prints a JSON line per item."""
    (out / f"{phase}_items.json").write_text(json.dumps(items))
    log = out / f"{phase}.jsonl"
    try:
        subprocess.run([sys.executable, __file__, "--child", phase, "--out", str(out), *extra],
                       timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"{phase}: stopped at its time limit of {timeout_s:.0f} s", flush=True)
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def timers_child(items: list[dict], log: Path) -> None:
    """Independent measures in a plain process, under the settings the judge states.

    do_bench (events around a call after an L2 flush), do_bench_cudagraph
    (launch gaps hidden), a back-to-back loop of calls, and the profiler's
    kernel time per call after an L2 flush; for eager also do_bench under
    PyTorch's literal defaults (TF32 convolutions), to show what that changes.
    """
    import torch
    import triton.testing

    from kernelevo.evaluate.shared.inputs import (build_model, import_source, make_inputs,
                                                  set_reference_precision, set_user_backend)

    folder = Path("/tmp/ke-kb-timers")
    folder.mkdir(exist_ok=True)
    for number, item in enumerate(items):
        set_user_backend(conv_tf32=False)  # what the judge states its contestants ran under
        module = import_source(Path(item["problem_path"]).read_text(), f"t_task_{number}", folder)
        candidate = import_source((CANDIDATES / item["file"]).read_text(), f"t_cand_{number}",
                                  folder)
        inputs = make_inputs(module, 1, "cuda", torch.float32)
        init = list(module.get_init_inputs())
        row = {"file": item["file"]}
        with torch.no_grad():
            for name, cls in (("candidate", candidate.ModelNew), ("eager", module.Model)):
                model = build_model(cls, init, "cuda", torch.float32)
                call = lambda model=model: model(*inputs)  # noqa: E731
                row[name] = {"do_bench": triton.testing.do_bench(call, return_mode="median"),
                             "graph": _graph_time(call), "loop": _loop_without_gc(call),
                             "loop_gc": _loop(call), "profiler": _profiler_kernel_ms(call)}
            eager = build_model(module.Model, init, "cuda", torch.float32)
            for label, settings in (("tf32", lambda: set_user_backend(conv_tf32=True)),
                                    ("strict", set_reference_precision)):
                settings()  # PyTorch's literal defaults; the reference's strict numerics
                row["eager"][f"do_bench_{label}"] = triton.testing.do_bench(
                    lambda: eager(*inputs), return_mode="median")
        _append(log, row)
        print(f"timers {item['file']}", flush=True)


def _loop(call, repeats: int = 7) -> float:
    """Milliseconds per call of a back-to-back loop of calls about 20 ms long, median of repeats."""
    import torch

    call()
    torch.cuda.synchronize()
    started = time.perf_counter()
    call()
    torch.cuda.synchronize()
    calls = max(10, int(0.02 / max(time.perf_counter() - started, 1e-6)))
    results = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        results.append((time.perf_counter() - started) * 1e3 / calls)
    return statistics.median(results)


def _loop_without_gc(call) -> float:
    """The back-to-back loop with Python's garbage collector off, as timeit times.

    In a process holding torch and Triton a full collection takes tens of
    milliseconds; with it on, a loop's time depends on when one lands.
    """
    import gc

    gc.collect()
    gc.disable()
    try:
        return _loop(call)
    finally:
        gc.enable()


def _graph_time(call) -> float | None:
    import torch
    import triton.testing

    try:
        with torch.cuda.stream(torch.cuda.Stream()):
            return triton.testing.do_bench_cudagraph(call, return_mode="median")
    except Exception:  # not every model captures
        return None


def _profiler_kernel_ms(call, calls: int = 20) -> float:
    """GPU kernel time per call by the profiler, the L2 flushed before each call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.int8,
                        device="cuda")
    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.zero_()
            call()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    with profile(activities=[ProfilerActivity.CUDA]) as alone:  # the flush's own kernel
        flush.zero_()
        torch.cuda.synchronize()
    flush_names = {e.name for e in alone.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA}
    total_us = sum(getattr(e, "device_time", None) or e.cuda_time for e in events
                   if e.name not in flush_names)
    return total_us / calls / 1e3


def kernelbench_child(items: list[dict], log: Path, kb_src: str, deps: str) -> None:
    if deps and Path(deps).is_dir():
        sys.path.insert(0, str(Path(deps).resolve()))
    import kb_harness

    kb_harness.install_stubs()
    kb_eval, timing, _ = kb_harness.import_kernelbench(kb_src)
    settings = argparse.Namespace(gpu_arch="Hopper", num_correct_trials=5, num_perf_trials=100,
                                  timing_method="cuda_event", backend="triton",
                                  ref_program_time=False)
    for item in items:
        started = time.perf_counter()
        try:
            result = kb_harness.measure(kb_eval, timing, Path(item["problem_path"]).read_text(),
                                        (CANDIDATES / item["file"]).read_text(), settings)
        except Exception as exc:  # KernelBench's own failure is a result
            result = {"error": f"{type(exc).__name__}: {exc}"}
        result = kb_harness.jsonable(result)
        result.update(file=item["file"], wall_s=round(time.perf_counter() - started, 2))
        _append(log, result)
        print(f"kernelbench {item['file']} {result.get('correctness')} "
              f"{result.get('speedup')}", flush=True)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def combine(judged: list[dict], timers: list[dict], kernelbench: list[dict]) -> list[dict]:
    """One row per entry: verdict, our three measures and the independent timers."""
    by_file = {"timers": {r["file"]: r for r in timers},
               "kernelbench": {r["file"]: r for r in kernelbench}}
    rows = []
    for row in judged:
        out = {k: row[k] for k in ("file", "problem", "kind", "reason", "right", "wall_s")}
        measures = row.get("measures") or {}
        if "gpu" in measures:
            ours = {m: {n: (s["mean_ms"] if m == "kernelbench" else s["median_ms"])
                        for n, s in measures[m].items()} for m in measures}
            out["ours"] = ours
            out["speedup"] = {m: _ratio(ours[m].get("eager"), ours[m].get("candidate"))
                              for m in ours}
        timer = by_file["timers"].get(row["file"])
        if timer and "ours" in out:
            out["timers"] = timer
            out["speedup"]["do_bench"] = _ratio(timer["eager"]["do_bench"],
                                                timer["candidate"]["do_bench"])
            out["speedup"]["loop"] = _ratio(timer["eager"]["loop"], timer["candidate"]["loop"])
            out["gpu_over_do_bench"] = _ratio(out["ours"]["gpu"]["candidate"],
                                              timer["candidate"]["do_bench"])
            out["call_over_loop"] = _ratio(out["ours"]["call"]["candidate"],
                                           timer["candidate"]["loop"])
            for who in ("candidate", "eager"):  # each contestant against its counterpart
                out[f"{who}_gpu_over_profiler"] = _ratio(out["ours"]["gpu"].get(who),
                                                         timer[who].get("profiler"))
                out[f"{who}_call_over_loop"] = _ratio(out["ours"]["call"].get(who),
                                                      timer[who]["loop"])
                out[f"{who}_gpu_over_graph"] = _ratio(out["ours"]["gpu"].get(who),
                                                      timer[who].get("graph"))
            out["eager_gpu_over_do_bench"] = _ratio(out["ours"]["gpu"].get("eager"),
                                                    timer["eager"]["do_bench"])
            out["speedup"]["graph"] = _ratio(timer["eager"].get("graph"),
                                             timer["candidate"].get("graph"))
        kb = by_file["kernelbench"].get(row["file"])
        if kb:
            out["kernelbench"] = {k: kb.get(k) for k in ("correctness", "runtime",
                                                          "ref_runtime", "speedup", "error")}
            if "ours" in out and kb.get("runtime"):
                out["kb_mode_over_harness"] = _ratio(out["ours"]["kernelbench"]["candidate"],
                                                     kb["runtime"])
        rows.append(out)
    return rows


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(rows: list[dict]) -> str:
    """Speedups over eager by each measure, and each of our times over its counterpart."""
    lines = ["| candidate | verdict | eager ms (call) | GPU x | graph x | call x | loop x | "
             "do_bench x | KB-mode x | cand GPU/prof | cand call/loop | eager GPU/prof | "
             "eager call/loop | eager GPU/do_bench | eager do_bench TF32/fp32 | "
             "eager do_bench strict/default |",
             "|" + "---|" * 16]
    for row in rows:
        speed = row.get("speedup", {})
        eager = row.get("timers", {}).get("eager", {})
        tf32 = _ratio(eager.get("do_bench_tf32"), eager.get("do_bench"))
        strict = _ratio(eager.get("do_bench_strict"), eager.get("do_bench"))
        eager_ms = row.get("ours", {}).get("call", {}).get("eager")
        lines.append(f"| {row['file']} | {row['reason']}{'' if row['right'] else ' (WRONG)'} | "
                     f"{_fmt(eager_ms, 4)} | {_fmt(speed.get('gpu'))} | "
                     f"{_fmt(speed.get('graph'))} | {_fmt(speed.get('call'))} | "
                     f"{_fmt(speed.get('loop'))} | {_fmt(speed.get('do_bench'))} | "
                     f"{_fmt(speed.get('kernelbench'))} | "
                     f"{_fmt(row.get('candidate_gpu_over_profiler'), 3)} | "
                     f"{_fmt(row.get('candidate_call_over_loop'), 3)} | "
                     f"{_fmt(row.get('eager_gpu_over_profiler'), 3)} | "
                     f"{_fmt(row.get('eager_call_over_loop'), 3)} | "
                     f"{_fmt(row.get('eager_gpu_over_do_bench'), 3)} | {_fmt(tf32, 3)} | "
                     f"{_fmt(strict, 2)} |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> dict:
    honest = [r for r in rows if r["kind"] == "honest"]
    bad = [r for r in rows if r["kind"] == "bad"]

    def spread(key: str) -> dict:
        values = [abs(r[key] - 1) for r in rows if r.get(key)]
        within = lambda limit: sum(v <= limit for v in values)  # noqa: E731
        return {"n": len(values), "median_off": statistics.median(values) if values else None,
                "within_5pct": within(0.05), "within_10pct": within(0.10)}

    return {"honest": len(honest), "honest_rejected": [r["file"] for r in honest if not r["right"]],
            "bad": len(bad), "bad_accepted": [r["file"] for r in bad if not r["right"]],
            "gpu_vs_do_bench": spread("gpu_over_do_bench"),
            "call_vs_loop": spread("call_over_loop"),
            **{f"{who}_{pair}": spread(f"{who}_{pair.replace('_vs_', '_over_')}")
               for who in ("candidate", "eager")
               for pair in ("gpu_vs_profiler", "call_vs_loop", "gpu_vs_graph")},
            "eager_gpu_vs_do_bench": spread("eager_gpu_over_do_bench"),
            # a kernel slower than eager for a user (the loop) called faster by a measure
            "faster_by_gpu_slower_by_loop": [r["file"] for r in rows if _flipped(r, "gpu")],
            "faster_by_call_slower_by_loop": [r["file"] for r in rows if _flipped(r, "call")],
            "kb_mode_vs_harness": spread("kb_mode_over_harness")}


def _flipped(row: dict, measure: str) -> bool:
    speed = row.get("speedup", {})
    ours, loop = speed.get(measure), speed.get("loop")
    return bool(ours and loop and ours > 1.0 and loop < 0.95)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kb", type=Path, help="KernelBench checkout (KernelBench/level1, src)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--deps", default=".kbdeps", help="KernelBench's extra packages")
    parser.add_argument("--max-elements", type=int, default=1 << 24)
    parser.add_argument("--only", nargs="*", help="problems (level2/20; bare numbers: level 1) "
                        "or candidate files")
    parser.add_argument("--honest-triton", action="store_true",
                        help="only the honest Triton entries (the timing agreement table)")
    parser.add_argument("--phases", nargs="*", default=["judge", "timers", "kernelbench"])
    parser.add_argument("--timers-timeout", type=float, default=600.0)
    parser.add_argument("--kernelbench-timeout", type=float, default=900.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        items = json.loads((args.out / f"{args.child}_items.json").read_text())
        log = args.out / f"{args.child}.jsonl"
        if args.child == "timers":
            timers_child(items, log)
        else:
            kernelbench_child(items, log, str(args.kb / "src"), args.deps)
        return
    entries = load_entries(args.only, args.honest_triton)
    problems = prepare(entries, args.kb, args.out, args.max_elements)
    (args.out / "problems.json").write_text(json.dumps(problems, indent=1))
    judged = judge_phase(entries, problems, args.out / "judge.jsonl") \
        if "judge" in args.phases else []
    honest = [{"file": r["file"], "problem_path": problems[r["problem"]]["path"]}
              for r in judged if r["kind"] == "honest" and r["reason"] == "passed"]
    timers = run_child("timers", honest, args.out, ["--kb", str(args.kb)],
                       args.timers_timeout) \
        if "timers" in args.phases else []
    kernelbench = run_child("kernelbench", honest, args.out,
                            ["--kb", str(args.kb), "--deps", args.deps],
                            args.kernelbench_timeout) \
        if "kernelbench" in args.phases else []
    rows = combine(judged, timers, kernelbench)
    result = {"summary": summary(rows), "rows": rows, "problems": problems}
    (args.out / "kernelbench_batch.json").write_text(json.dumps(result, indent=1))
    (args.out / "kernelbench_batch.md").write_text(table(rows) + "\n")
    print(table(rows))
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
