"""Candidates judged per hour on one GPU, warm judging, pipelining, and the CLI's cold start.

    KERNELEVO_CACHE_DIR=/tmp/ke-cache PYTHONPATH=src python3 bench/throughput.py \\
        --kb .kb --out DIR [--only 19 23 ...] [--kb-sample 12] [--phases pool1 pool2 kb cli]

Corpus: the KernelBench level-1 candidates of bench/kernelbench/manifest.toml
(honest and bad), each problem shrunk as bench/kernelbench_batch.py does.
Phases (each appends JSON lines to DIR/throughput.jsonl, so a cut-off run
keeps what finished):
  pool1  every candidate through the service's JudgePool, one job at a time
         (warm judges kept per task, standby sessions), default settings:
         both baselines, GPU time
  pool2  the same corpus with two jobs at once on the GPU (lanes=2): checks
         overlap, timing takes turns; per-candidate GPU medians compared
         with pool1's (pipelining must not change them)
  pool1c, pool3c, ...  the same, a task's first evaluation starting its
         standby once its candidates are checked, not once its worker is warm
         (Judge.standby_after; 2026-12-01 runs named the warm ones pool1w)
  kb     KernelBench's harness, one fresh process per candidate
         (bench/kb_harness.py: eval_kernel_against_ref), on --kb-sample
         honest candidates, the rate extrapolated per candidate
  kb_bytecode  the same with the harness's imports' bytecode cached (where
         the machine forbids writing bytecode, as this project's processes
         cache theirs: kernelevo.cache_dir)
  cli    `kernelevo eval --local` cold (caches warm, then caches empty), and
         `kernelevo eval` through a running `kernelevo serve` (first and
         second job of a task)
Prints a summary table last; DIR/throughput.json holds every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from kernelbench_batch import CANDIDATES, load_entries, prepare  # noqa: E402

SOFTMAX = ROOT / "examples" / "softmax"


def _log(out: Path, row: dict) -> None:
    with (out / "throughput.jsonl").open("a") as file:
        file.write(json.dumps(row) + "\n")


def _timed_work_s(verdict, call_loop_ms: float = 2.0) -> float:
    """Seconds the candidate itself ran while timed: its GPU-time samples and its call loops.

    A call-time sample is one loop of back-to-back calls lasting about
    call_loop_ms (at least three calls); baselines' timed work is not counted.
    """
    total = 0.0
    for measure, stats in verdict.measures.items():
        own = stats.get("candidate")
        if own is None:
            continue
        per_sample = (max(call_loop_ms, 3 * own.median_ms) if measure == "call"
                      else own.median_ms)
        total += own.samples * per_sample
    return total / 1e3


def pool_phase(entries: list[dict], problems: dict, phase: str, out: Path) -> dict:
    from kernelevo.candidate import load_candidate
    from kernelevo.config import EvalConfig
    from kernelevo.evaluate.parent.judge import Judge
    from kernelevo.evaluate.protocol import JudgeJob
    from kernelevo.evaluate.remote.service import JudgePool, ServiceSettings
    from kernelevo.task import load_task

    lanes = int(phase[4:].rstrip("wc"))
    # poolNc: a task's first evaluation starts its standby once its candidates
    # are checked; poolN, poolNw: once its worker is warm (the judge's default).
    Judge.standby_after = "checked" if phase.endswith("c") else "warm"
    pool = JudgePool(ServiceSettings(gpus=[0], lanes=lanes, max_judges=64))

    def one(entry: dict) -> dict:
        task = load_task(problems[entry["problem"]]["path"])
        job = JudgeJob.of(task, [load_candidate(CANDIDATES / entry["file"])], EvalConfig())
        started = time.perf_counter()
        try:
            verdict = pool.judge(job)[0][0]
        except Exception as exc:  # noqa: BLE001 - a row, not the end
            return {"file": entry["file"], "reason": f"error: {exc}"[:200]}
        wall = time.perf_counter() - started
        gpu = verdict.measures.get("gpu", {}).get("candidate")
        return {"phase": phase, "file": entry["file"], "problem": entry["problem"],
                "kind": entry["kind"],
                "reason": verdict.reason, "right": verdict.reason in entry["expect_reasons"],
                "wall_s": round(wall, 3), "timed_work_s": round(_timed_work_s(verdict), 3),
                "phases": verdict.phases_s,
                "gpu_median_ms": gpu.median_ms if gpu else None,
                "speedup_vs_eager": verdict.speedup_vs_eager}

    # A problem's candidates in a row, as a search sends them: the first warms
    # its judge, the next finds a standby session.
    ordered = sorted(entries, key=lambda e: e["problem"])
    started = time.perf_counter()
    rows = []
    with ThreadPoolExecutor(max_workers=lanes) as executor:
        for row in executor.map(one, ordered):
            rows.append(row)
            _log(out, row)
            print(f"{phase} {row['file']:46} {row['reason']:22} {row.get('wall_s', 0):6.2f}s",
                  flush=True)
    total = time.perf_counter() - started
    pool.close()
    warm = [r for r in rows if r.get("phases", {}).get("worker_start", 9) < 0.5
            and r["reason"] == "passed"]
    honest = [r["wall_s"] for r in rows if r.get("kind") == "honest" and "wall_s" in r]
    passed = [r for r in rows if r.get("reason") == "passed"]
    phase_medians = {key: round(statistics.median(r["phases"].get(key, 0.0) for r in passed), 3)
                     for key in sorted({k for r in passed for k in r["phases"]})} if passed else {}
    return {"lanes": lanes, "candidates": len(rows), "wall_s": round(total, 1),
            "passed_phase_medians_s": phase_medians,
            "honest_median_wall_s": round(statistics.median(honest), 3) if honest else None,
            "per_hour": round(3600 * len(rows) / total),
            "right": sum(1 for r in rows if r.get("right")),
            "warm_passed": len(warm),
            "warm_beyond_timed_median_s": round(statistics.median(
                r["wall_s"] - r["timed_work_s"] for r in warm), 3) if warm else None,
            "rows": rows}


def compare_pools(one: dict, two: dict) -> dict:
    """Per-candidate GPU medians, two jobs at once vs one: ratios and how far apart."""
    alone = {r["file"]: r for r in one["rows"] if r.get("gpu_median_ms")}
    ratios = {r["file"]: r["gpu_median_ms"] / alone[r["file"]]["gpu_median_ms"]
              for r in two["rows"] if r.get("gpu_median_ms") and r["file"] in alone}
    off = sorted(abs(x - 1) for x in ratios.values())
    return {"n": len(off), "median_off": statistics.median(off) if off else None,
            "within_1pct": sum(1 for x in off if x <= 0.01),
            "within_3pct": sum(1 for x in off if x <= 0.03), "ratios": ratios}


def kb_phase(entries: list[dict], problems: dict, sample: int, kb: Path, out: Path,
             bytecode: bool = False) -> dict:
    """KernelBench's harness, one process per candidate; `bytecode`: its imports' bytecode cached.

    With `bytecode` the processes may write and read bytecode (in a folder of
    their own) even where the machine sets PYTHONDONTWRITEBYTECODE, as this
    project's own processes do (kernelevo.cache_dir), and one run first
    writes it, uncounted: the harness then pays no more for imports than it
    would on a machine that ships bytecode.
    """
    honest = [e for e in entries if e["kind"] == "honest"][:sample]
    env = dict(os.environ)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="kb-pyc-")
    label = "kb_bytecode" if bytecode else "kb"

    def harness(entry: dict) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "bench" / "kb_harness.py"),
                               "--kb-src", str(kb / "src"), "--deps", ".kbdeps",
                               problems[entry["problem"]]["path"],
                               str(CANDIDATES / entry["file"])],
                              capture_output=True, text=True, timeout=300, env=env)

    if bytecode and honest:
        harness(honest[0])  # writes the bytecode
    walls = []
    started = time.perf_counter()
    for entry in honest:
        begun = time.perf_counter()
        done = harness(entry)
        wall = time.perf_counter() - begun
        walls.append(wall)
        last = (done.stdout.strip().splitlines() or ["{}"])[-1]
        row = {"phase": label, "file": entry["file"], "wall_s": round(wall, 3),
               "rc": done.returncode, "result": last[:300]}
        _log(out, row)
        print(f"{label:11} {entry['file']:46} rc={done.returncode} {wall:6.2f}s", flush=True)
    total = time.perf_counter() - started
    return {"candidates": len(walls), "wall_s": round(total, 1),
            "per_hour": round(3600 * len(walls) / total) if walls else None,
            "median_wall_s": round(statistics.median(walls), 3) if walls else None}


def _cli(args: list[str], env: dict) -> tuple[float, int, str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kernelevo.cli.app", *args], capture_output=True,
                          text=True, env=env, timeout=300)
    return time.perf_counter() - started, done.returncode, (done.stdout + done.stderr)[-600:]


def cli_phase(out: Path) -> dict:
    task, candidate = str(SOFTMAX / "task.py"), str(SOFTMAX / "triton_candidate.py")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    figures = {}
    for label in ("warm_caches_1", "warm_caches_2"):
        wall, rc, tail = _cli(["eval", task, candidate, "--local"], env)
        figures[label] = {"wall_s": round(wall, 2), "rc": rc}
        _log(out, {"phase": "cli", "label": label, "wall_s": wall, "rc": rc, "tail": tail})
    cold = dict(env, KERNELEVO_CACHE_DIR=tempfile.mkdtemp(prefix="ke-cold-"),
                TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="triton-cold-"))
    wall, rc, tail = _cli(["eval", task, candidate, "--local"], cold)
    figures["empty_caches"] = {"wall_s": round(wall, 2), "rc": rc}
    _log(out, {"phase": "cli", "label": "empty_caches", "wall_s": wall, "rc": rc, "tail": tail})
    serve_env = dict(env, KERNELEVO_CACHE_DIR=tempfile.mkdtemp(prefix="ke-serve-"))
    for key in ("TRITON_CACHE_DIR",):
        serve_env.pop(key, None)
    started = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "kernelevo.cli.app", "serve"], env=serve_env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    record = Path(serve_env["KERNELEVO_CACHE_DIR"]) / "service.json"
    while not record.exists() and time.perf_counter() - started < 120:
        time.sleep(0.1)
    figures["serve_start_s"] = round(time.perf_counter() - started, 2)
    try:
        for label in ("service_first", "service_second", "service_third"):
            wall, rc, tail = _cli(["eval", task, candidate], serve_env)
            figures[label] = {"wall_s": round(wall, 2), "rc": rc,
                              "on_service": "service" in tail or rc in (0, 1)}
            _log(out, {"phase": "cli", "label": label, "wall_s": wall, "rc": rc, "tail": tail})
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--triton-only", action="store_true",
                        help="leave the CUDA candidates out (the warm figure is a Triton one)")
    parser.add_argument("--kb-sample", type=int, default=12)
    parser.add_argument("--max-elements", type=int, default=1 << 24)
    parser.add_argument("--phases", nargs="*", default=["pool1", "pool2", "kb", "cli"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    entries = load_entries(args.only, forward_only=True)
    if args.triton_only:
        entries = [e for e in entries if e.get("backend", "triton") == "triton"]
    problems = prepare(entries, args.kb, Path(tempfile.mkdtemp(prefix="tp-")), args.max_elements)
    result: dict = {"corpus": len(entries), "problems": len(problems)}
    for phase in args.phases:
        if phase.startswith("pool"):  # pool1, pool2, pool4: jobs at once on the GPU
            result[phase] = pool_phase(entries, problems, phase, args.out)
        elif phase in ("kb", "kb_bytecode"):
            result[phase] = kb_phase(entries, problems, args.kb_sample, args.kb, args.out,
                                     bytecode=phase == "kb_bytecode")
        elif phase == "cli":
            result["cli"] = cli_phase(args.out)
        (args.out / "throughput.json").write_text(json.dumps(result, indent=1))
    for phase in args.phases:
        if phase.startswith("pool") and phase != "pool1" and "pool1" in result:
            key = "pipelining" if phase == "pool2" else f"pipelining_{phase}"
            result[key] = compare_pools(result["pool1"], result[phase])
    (args.out / "throughput.json").write_text(json.dumps(result, indent=1))
    short = {k: ({kk: vv for kk, vv in v.items() if kk not in ("rows", "ratios")}
                 if isinstance(v, dict) else v) for k, v in result.items()}
    print(json.dumps(short, indent=1))


if __name__ == "__main__":
    main()
