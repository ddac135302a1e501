"""GPU benchmark of `kernelevo evolve` (issue 3's acceptance runs).

    python3 bench/evolve_gpu.py --out DIR [scripted tuner latency scaling] [--quick]

  scripted  a fake LLM server plays a series of real kernels for the softmax
            example (three-pass, then fused); the best-so-far must improve
  tuner     no LLM: the tuner alone, from the gelu example's Triton kernel as
            written and from a copy with poor launch parameters
  tuner_gemm  the same from the GEMM example's Triton kernel as written
  latency   8 requests in flight, each answered after 10-30 s, no tuner: share
            of wall time the evaluation GPU is busy once candidates are queued
  scaling   runs of fixed length on one GPU and on two, fed by an instant fake
            LLM: evaluated candidates per hour

Each step writes DIR/<step>.json as it finishes. --quick shrinks every step
(for a dry run on the CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import random
from collections import Counter
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from busy_share import busy_share  # noqa: E402
from kernelevo.store.run_store import RunStore  # noqa: E402
from tests.fakes.openai_server import Delay, FakeOpenAIServer  # noqa: E402

SOFTMAX = ROOT / "examples/softmax"
GELU = ROOT / "examples/gelu"
GEMM = ROOT / "examples/gemm_bias_relu"
LENGTHS = {"latency": "5m", "scaling": "4m"}  # --time of those runs; set from the command line


def fenced(source: str) -> str:
    return f"A faster version:\n\n```python\n{source}\n```\n"


def evolve(runs: Path, task: Path, *flags: str, server: FakeOpenAIServer | None = None,
           config: str = "") -> RunStore:
    """Run the real CLI; returns the run's store."""
    runs.mkdir(parents=True, exist_ok=True)
    config_file = runs / "kernelevo.toml"
    config_file.write_text(config)
    command = [sys.executable, "-m", "kernelevo.cli.app", "evolve", str(task), "--runs-dir",
               str(runs), "--config", str(config_file), *flags]
    if server is not None:
        command += ["--model", "fake-model", "--base-url", server.base_url]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    before = set(runs.glob("*/run.db"))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    (path,) = set(runs.glob("*/run.db")) - before
    return RunStore.open(path)


def trajectory(store: RunStore) -> list[dict]:
    """Every judged candidate in order, with the best speedup so far."""
    rows, best = [], None
    judged = [c for c in store.candidates() if c.verdict is not None]
    for stored in sorted(judged, key=lambda c: c.evaluated_at or 0.0):
        verdict = stored.verdict
        speedup = verdict.speedup_vs_eager if verdict.ok else None
        if speedup is not None:
            best = max(best or 0.0, speedup)
        timing = verdict.timings.get("candidate")
        rows.append({"id": stored.id, "origin": stored.candidate.origin,
                     "status": verdict.status, "reason": verdict.reason,
                     "median_ms": timing.median_ms if timing else None,
                     "speedup_vs_eager": speedup, "best_so_far": best,
                     "evaluated_at": stored.evaluated_at})
    return rows


def scripted(out: Path, quick: bool) -> dict:
    slow = (ROOT / "bench/kernels/softmax_three_pass.py").read_text()
    fast = (SOFTMAX / "triton_candidate.py").read_text()
    with FakeOpenAIServer([fenced(slow), fenced(fast)], default=fenced(fast)) as server:
        store = evolve(out / "runs-scripted", SOFTMAX / "task.py", "--candidates", "3",
                       "--llm-in-flight", "1", server=server)
    rows = trajectory(store)
    llm = [r for r in rows if r["origin"] == "llm" and r["speedup_vs_eager"]]
    return {"trajectory": rows, "improved": len(llm) >= 2
            and llm[-1]["best_so_far"] > llm[0]["speedup_vs_eager"]}


def detuned(source: str) -> str:
    """The same kernel with launch parameters far from good ones."""
    return source.replace("num_warps=4", "num_warps=1").replace("num_warps=8", "num_warps=1")


def tuner(out: Path, quick: bool) -> dict:
    """The gelu example as written and detuned, each the seed of a tuner-only run."""
    source = (GELU / "triton_candidate.py").read_text()
    return {"as_written": _tuned(out, GELU, "gelu_as_written", source, 16, quick),
            "detuned": _tuned(out, GELU, "gelu_detuned", detuned(source), 16, quick)}


def tuner_gemm(out: Path, quick: bool) -> dict:
    """The GEMM example as written, seed of a tuner-only run: tile sizes matter here."""
    source = (GEMM / "triton_candidate.py").read_text()
    return {"as_written": _tuned(out, GEMM, "gemm_as_written", source, 12, quick)}


def _tuned(out: Path, example: Path, label: str, source: str, candidates: int,
           quick: bool) -> dict:
    seed = out / f"{label}.py"
    seed.write_text(source)
    store = evolve(out / f"runs-tuner-{label}", example / "task.py", "--seed", str(seed),
                   "--candidates", "4" if quick else str(candidates), "--no-compile")
    rows = trajectory(store)
    # c0001 is the reference itself; the user's seed follows it.
    seed_ms = next((r["median_ms"] for r in rows if r["origin"] == "seed"
                    and r["median_ms"] and r["id"] != "c0001"), None)
    tuned = [r["median_ms"] for r in rows if r["origin"] == "tuner" and r["median_ms"]]
    return {"seed_ms": seed_ms, "best_tuned_ms": min(tuned) if tuned else None,
            "gain": seed_ms / min(tuned) if seed_ms and tuned else None, "trajectory": rows}


def latency(out: Path, quick: bool) -> dict:
    fast = (SOFTMAX / "triton_candidate.py").read_text()
    low, high = (0.5, 1.5) if quick else (10.0, 30.0)
    rng = random.Random(0)

    def answer(request: dict):
        # Distinct sources: a comment makes each proposal a new candidate.
        return Delay(rng.uniform(low, high), fenced(f"# variant {rng.random()}\n{fast}"))

    with FakeOpenAIServer([], default=answer) as server:
        started = time.monotonic()
        # No tuner: only the LLM's answers feed the GPU, so its latency is what is hidden.
        store = evolve(out / "runs-latency", SOFTMAX / "task.py", "--llm-in-flight", "8",
                       "--time", "1m" if quick else LENGTHS["latency"], server=server,
                       config="[search]\ntuner_variants = 0\n")
        wall_s = time.monotonic() - started
    busy = [e.payload for e in store.events("busy")]
    calls = [(c.started_at, c.finished_at) for c in store.llm_calls()]
    return {"wall_s": wall_s, "llm_requests": len(server.requests),
            "most_in_flight": max(sum(1 for s, f in calls if s <= t < (f or t + 1))
                                  for t, _ in calls) if calls else 0,
            "origins": Counter(c.candidate.origin for c in store.candidates()),
            "judged": sum(1 for c in store.candidates() if c.verdict is not None),
            "busy_share_after_first_queue": busy[-1]["share"] if busy else None,
            "busy_from_first_llm_candidate": busy_share(store, "first-llm")}


def scaling(out: Path, quick: bool) -> dict:
    """Judged candidates per hour on one GPU and on two, the LLM never the bottleneck.

    The fake server answers at once with distinct variants of the softmax
    example (a comment differs), 8 requests in flight, so candidates are
    always queued and the judges set the pace.
    """
    import torch

    fast = (SOFTMAX / "triton_candidate.py").read_text()
    results = {}
    gpu_sets = ["0"] + (["0,1"] if torch.cuda.device_count() >= 2 else [])
    # A short run first, so both measured runs find the compile caches warm
    # (the run recorded on 2026-11-30 predates this: its one-GPU run was cold).
    with FakeOpenAIServer([], default=lambda request: fenced(fast)) as server:
        evolve(out / "runs-scaling-warmup", SOFTMAX / "task.py", "--candidates", "1",
               "--gpus", ",".join(str(i) for i in range(torch.cuda.device_count())) or "0",
               server=server)
    for gpus in gpu_sets:
        rng = random.Random(gpus)
        with FakeOpenAIServer([], default=lambda request: fenced(
                f"# variant {rng.random()}\n{fast}")) as server:
            started = time.monotonic()
            store = evolve(out / f"runs-scaling-{gpus.replace(',', '')}", SOFTMAX / "task.py",
                           "--gpus", gpus, "--llm-in-flight", "8", "--candidates", "1000",
                           "--time", "1m" if quick else LENGTHS["scaling"], server=server)
            wall_s = time.monotonic() - started
        judged = sum(1 for c in store.candidates() if c.verdict is not None)
        busy = [e.payload for e in store.events("busy")]
        results[gpus] = {"wall_s": wall_s, "judged": judged, "per_hour": judged / wall_s * 3600,
                         "busy": busy[-1] if busy else None}
    if len(results) == 2:
        results["ratio"] = results["0,1"]["per_hour"] / results["0"]["per_hour"]
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--latency-time", default=LENGTHS["latency"])
    parser.add_argument("--scaling-time", default=LENGTHS["scaling"])
    parser.add_argument("steps", nargs="*", default=["scripted", "tuner", "tuner_gemm", "latency",
                                                         "scaling"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    LENGTHS.update(latency=args.latency_time, scaling=args.scaling_time)
    steps = {"scripted": scripted, "tuner": tuner, "tuner_gemm": tuner_gemm, "latency": latency,
             "scaling": scaling}
    for step in args.steps:
        started = time.perf_counter()
        try:
            result = steps[step](args.out, args.quick)
        except Exception as exc:  # one failed step must not lose the others
            result = {"error": f"{type(exc).__name__}: {exc}"[-3000:]}
        (args.out / f"{step}.json").write_text(json.dumps(result, indent=1, default=str))
        summary = {k: v for k, v in result.items() if k != "trajectory"} \
            if isinstance(result, dict) else result
        print(f"== {step} ({time.perf_counter() - started:.0f}s):",
              json.dumps(summary, default=str)[:600], flush=True)


if __name__ == "__main__":
    main()
