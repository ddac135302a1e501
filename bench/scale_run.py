"""A synthetic run of N candidates, written through the store's API, and what it costs to show.

    python3 bench/scale_run.py [--candidates 50000] [--runs-dir DIR] [--json OUT]

Every candidate gets an LLM call (finished, failed or, for the last few,
still started as if cut off by a kill), a verdict of a realistic mix and a
few events, so the report, the status plot, the progress totals and resume
read a database shaped like a long search. Measured: writing the report
(seconds, bytes), the status plot's SVG (bytes, steps), the totals query the
progress tick runs (ms), and opening the run for resume (s). Writes skip the
fsync (synchronous=OFF): a benchmark database needs no crash safety.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

# Appended, so PYTHONPATH can point at another checkout (figures before a change).
sys.path.append(str(Path(__file__).resolve().parent.parent / "src"))

from kernelevo.candidate import Candidate  # noqa: E402
from kernelevo.evaluate.verdict import TimingStats, verdict_for  # noqa: E402
from kernelevo.store import RunStore  # noqa: E402

SEED_SOURCE = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
PROMPT = {"messages": [{"role": "user", "content": "make it faster " * 200}]}
REPLY = "```python\n" + "x = x * 2  # a line of a kernel\n" * 60 + "```"
REASONS = ("passed",) * 5 + ("output_mismatch", "syntax_error", "forward_failed", "try_fallback")


def generate(runs_dir: Path, count: int, seed: int = 0) -> Path:
    """Write a run of `count` candidates; returns its run directory."""
    rng = random.Random(seed)
    config = {"search": {"backend": "triton", "islands": 3}, "budget": {"candidates": count}}
    with RunStore.create(runs_dir, "scale/add", "class Model: ...", config) as store:
        store._database.query("PRAGMA synchronous = OFF")
        speedup = 1.0
        for index in range(count):
            call = store.start_llm_call("gpt-x", PROMPT, max_output_tokens=8192,
                                        cost_bound_usd=0.08)
            source = f"{SEED_SOURCE}        return x * {index}\n"
            candidate_id = store.add_candidate(
                Candidate(source, "triton", name=f"variant {index}", origin="llm"),
                island=index % 3, cell=("triton", str(index % 4), index % 2 == 0))
            if index >= count - 4:
                continue  # in flight when the run was killed: no reply, no verdict
            if rng.random() < 0.05:
                store.fail_llm_call(call, "HTTP 500", input_tokens=3000)
            else:
                store.finish_llm_call(call, REPLY, 3000, 900, 0.004, 3.0,
                                      candidate_id=candidate_id)
            store.record_verdict(candidate_id, _verdict(rng, speedup))
            speedup += rng.random() * 0.001
            if index % 10 == 0:
                store.log_event("elite", {"candidate": candidate_id, "island": index % 3})
            if index % 25 == 0:
                store.log_event("elapsed", {"elapsed_s": float(index)})
        store.set_status("interrupted")
        return store.path.parent


def _verdict(rng: random.Random, speedup: float):
    reason = rng.choice(REASONS)
    if reason != "passed":
        return verdict_for(reason, "synthetic")
    own = 1.0 / (speedup * rng.uniform(0.5, 1.0))
    timings = {"candidate": TimingStats(own, 0.01, own * 0.95, 50),
               "eager": TimingStats(1.0, 0.01, 0.95, 50)}
    return verdict_for("passed", timings=timings, speedup_vs_eager=1.0 / own,
                       speedup_vs_compile=0.8 / own)


def measure(run_dir: Path) -> dict[str, float]:
    """Seconds and bytes of what a user waits for on a run this size."""
    from kernelevo.report import write_report
    from kernelevo.report.data import load_run
    from kernelevo.report.html import run_plots

    figures: dict[str, float] = {}
    started = time.perf_counter()
    output = write_report(run_dir, run_dir / "report.html")
    figures["report_write_s"] = time.perf_counter() - started
    figures["report_bytes"] = output.stat().st_size
    status = run_plots(load_run(run_dir))["status"]
    figures["status_plot_bytes"] = len(str(status).encode())
    figures["status_plot_steps"] = int(str(status).split('data-points="')[1].split('"')[0])
    with RunStore.open(run_dir) as store:
        started = time.perf_counter()
        for _ in range(20):
            store.totals()
        figures["totals_ms"] = (time.perf_counter() - started) / 20 * 1000
    figures["resume_open_s"] = _resume_open_s(run_dir)
    return figures


def _resume_open_s(run_dir: Path) -> float:
    """What resume reads before its first new call: pending work, cut-off calls, ranking."""
    started = time.perf_counter()
    with RunStore.open(run_dir) as store:
        store.pending()
        store.interrupted_llm_calls()
        store.ranking()
        store.totals()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=50_000)
    parser.add_argument("--runs-dir", type=Path, default=None)
    parser.add_argument("--run", type=Path, default=None, help="measure this run, generate none")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="kernelevo-scale-"))
    if args.run is None:
        started = time.perf_counter()
        run_dir = generate(runs_dir, args.candidates)
        generate_s = time.perf_counter() - started
    else:
        run_dir, generate_s = args.run, 0.0
    result = {"candidates": args.candidates, "run": str(run_dir), "generate_s": generate_s,
              **measure(run_dir)}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
