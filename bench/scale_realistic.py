"""A killed run of realistic size, written through the store's own API, and what it costs to read.

    python bench/scale_realistic.py generate --candidates 50000 --runs-dir /tmp/scale50k
    python bench/scale_realistic.py measure --run /tmp/scale50k/RUN_ID --cache warm --json OUT

Sizes as a long search leaves them: sources 3-8 KB, a verdict shaped like a
real one of ~1.8 KB (environment, errors, notes, phases, timings; failures
carry a log), prompts ~6 KB, replies ~4 KB, 3 islands, the archive's real
cells (backend, fusion, tensor cores, memory, block). The run ends killed:
status `running`, 8 LLM calls started and never answered, and the last
candidate mid-evaluation. (One, not more: a search holds its proposals back
while `queued_per_worker` x judges LLM candidates wait for judging, so with
more the first request would wait for the judge, not for the bookkeeping.)
Writes go through RunStore (one transaction each, as a search makes them)
with the fsync off.

`measure` times the commands a user runs, each in its own process: wall and
CPU seconds and peak RSS (bench/scale_measure.py says how): `evolve --resume` until its
first LLM request reaches a local fake server (the process is then
stopped), `show`, `show --json`, `runs`, `export --best --no-recheck`,
`report`, and the UI's run page (server response, first byte to last, of a
`kernelevo ui` started beforehand). `--cache cold` drops run.db's pages
from the page cache before each command: a sync, then
os.posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) on run.db (and its WAL).
resume writes to the run, so it runs on a copy made for each measurement.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "src"))

from kernelevo.candidate import Candidate  # noqa: E402
from kernelevo.config import EvalConfig  # noqa: E402
from kernelevo.evaluate.verdict import Verdict  # noqa: E402
from kernelevo.search.config import SearchConfig  # noqa: E402
from kernelevo.store.run_store import DB_NAME, RunStore  # noqa: E402

TASK = (ROOT / "examples" / "softmax" / "task.py").read_text()
ISLANDS, IN_FLIGHT = 3, 8
FUSION, MEMORY, BLOCK = ("0", "1", "2", "3+"), ("direct", "staged", "persistent"), (
    "small", "medium", "large", "unknown")
FAILURES = (("incorrect", "output_mismatch"), ("compile_error", "syntax_error"),
            ("runtime_error", "forward_failed"), ("compile_error", "triton_compile_failed"))
KERNEL_LINE = ("    acc = tl.where(mask, acc + tl.load(x_ptr + offsets * stride_{i}, mask=mask,"
               " other=0.0), acc)  # step {i}\n")
PROSE = ("The kernel keeps each row in registers, loads it once with a masked vector load, "
         "computes the maximum and the sum of exponentials in one pass, and writes the result. ")


def source_of(index: int, rng: random.Random) -> str:
    """A Triton candidate of 3-8 KB, unique to `index`."""
    head = (f"# candidate {index}\nimport torch\nimport triton\nimport triton.language as tl\n\n"
            "@triton.jit\ndef softmax_kernel(x_ptr, y_ptr, stride_0, n_cols,"
            " BLOCK: tl.constexpr):\n    row = tl.program_id(0)\n"
            "    offsets = tl.arange(0, BLOCK)\n    mask = offsets < n_cols\n    acc = 0.0\n")
    body = "".join(KERNEL_LINE.format(i=i) for i in range(rng.randint(25, 70)))
    tail = ("    tl.store(y_ptr + row * stride_0 + offsets, acc, mask=mask)\n\n\n"
            "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
            "        y = torch.empty_like(x)\n"
            "        softmax_kernel[(x.shape[0],)](x, y, x.stride(0), x.shape[1],"
            f" BLOCK={1 << (index % 8 + 7)})\n"
            "        return y\n")
    return head + body + tail


def prompt_of(index: int, parent_source: str) -> dict[str, Any]:
    """A ~6 KB prompt: the system text, the parent's code and what to try."""
    return {"mode": ("diff", "rewrite", "repair")[index % 3], "messages": [
        {"role": "system", "content": PROSE * 8},
        {"role": "user", "content": "Make this kernel faster.\n```python\n"
                                    + parent_source[:4200] + "\n```\n" + PROSE * 2}]}


def reply_of(source: str) -> str:
    """A ~4 KB reply: a little prose and the candidate's code."""
    return PROSE + "\n```python\n" + source[:3600] + "\n```\n"


def verdict_of(rng: random.Random, speedup: float) -> Verdict:
    """A verdict shaped like a real one (GPU environment, errors, timings), ~1.8 KB as JSON."""
    passed = rng.random() < 0.55
    eager_ms = 0.1763
    own_ms = eager_ms / speedup
    timings = {name: {"iqr_ms": ms * 0.012, "median_ms": ms, "method": "events",
                      "min_ms": ms * 0.985, "samples": 200}
               for name, ms in (("candidate", own_ms), ("eager", eager_ms),
                                ("compile", 0.1567))} if passed else {}
    status, reason = ("ok", "passed") if passed else rng.choice(FAILURES)
    data = {
        "environment": {"cuda": "13.0", "device": "cuda", "gpu": "NVIDIA H200",
                        "policy": "default", "precision": "fp32", "torch": "2.11.0+cu130",
                        "triton": "3.6.0"},
        "errors": {"atol": 0.0001, "max_abs_error": rng.random() * 1e-6,
                   "max_rel_error": rng.random() * 1e-6, "mismatch_fraction": 0.0 if passed
                   else rng.random(), "rel_l2_error": rng.random() * 1e-7, "rtol": 0.0001,
                   "worst_expected": rng.random(), "worst_index": [rng.randrange(4096),
                                                                   rng.randrange(16384)],
                   "worst_value": rng.random()},
        "flags": [], "isolation": "own process group, wall-clock kill, output cap, scratch cwd,"
                                  " fresh CUDA context, network off",
        "logs": "" if passed else ("Traceback (most recent call last):\n  File \"candidate.py\","
                                   " line 42, in forward\n" + "    " + PROSE[:90] + "\n") * 4,
        "message": "correct on every input set and honest" if passed else f"{reason}: see logs",
        "notes": ["own kernels: 100% of GPU kernel time", "physical floor 0.1118 ms"
                  " (memory-bound)", "timed with CUDA events, 200 samples after 25 warm-up"
                  " calls, L2 flushed between samples"],
        "phases_s": {"build": 0.0, "compile_baseline": rng.uniform(0.5, 5),
                     "correctness": rng.uniform(0.1, 1), "first_call": rng.uniform(0.1, 1),
                     "load": 0.0025, "timing": rng.uniform(0.5, 0.8), "total": rng.uniform(2, 7)},
        "reason": reason, "speedup_vs_compile": 0.1567 / own_ms if passed else None,
        "speedup_vs_eager": speedup if passed else None, "status": status,
        "timings": timings, "timing_measure": "gpu" if passed else ""}
    return Verdict.from_dict(data)


def cell_of(rng: random.Random) -> tuple[Any, ...]:
    return ("triton", rng.choice(FUSION), rng.random() < 0.3, rng.choice(MEMORY),
            rng.choice(BLOCK))


def run_config(base_url: str) -> dict[str, Any]:
    from kernelevo.run.setup import run_config as stored

    return stored(EvalConfig(device="cpu"), SearchConfig(islands=ISLANDS, llm_in_flight=IN_FLIGHT),
                  {"models": {"fake-model": 1.0}, "base_url": base_url,
                   "api_key_env": "OPENAI_API_KEY", "in_flight": IN_FLIGHT},
                  {"tokens": None, "usd": None, "candidates": None, "wall_s": None})


def generate(runs_dir: Path, count: int, seed: int = 0) -> Path:
    """Write a killed run of `count` candidates under `runs_dir`; returns its folder."""
    rng = random.Random(seed)
    reference = TASK.replace("class Model(", "class ModelNew(")
    with RunStore.create(runs_dir, "softmax", TASK, run_config("http://127.0.0.1:9/v1")) as store:
        store._database.query("PRAGMA synchronous = OFF")  # a benchmark needs no crash safety
        seed_id = store.add_candidate(Candidate(reference, "pytorch", name="reference",
                                                origin="seed"), island=0,
                                      cell=("pytorch", "0", False, "direct", "unknown"))
        store.record_verdict(seed_id, verdict_of(random.Random(1), 1.0))
        ceiling, parent_source, ids = 0.8, reference, [seed_id]
        for index in range(1, count):
            source = source_of(index, rng)
            call = store.start_llm_call("fake-model", prompt_of(index, parent_source),
                                        max_output_tokens=8192, cost_bound_usd=0.08)
            if index >= count - IN_FLIGHT:
                continue  # 8 calls in flight when the run was killed: never answered
            parent = rng.choice(ids[-500:])
            candidate_id = store.add_candidate(
                Candidate(source, "triton", name=f"variant {index}", origin="llm",
                          parent_ids=(parent,)), island=index % ISLANDS, cell=cell_of(rng))
            ids.append(candidate_id)
            store.finish_llm_call(call, reply_of(source), 1500, 1000, 0.004, 12.0,
                                  candidate_id=candidate_id)
            if index == count - IN_FLIGHT - 1:  # the one being judged at the kill
                store.mark_evaluating(candidate_id)
                continue
            # Most kernels are slower than the best so far: a run's best steps up
            # a few dozen times, not with every verdict.
            store.record_verdict(candidate_id, verdict_of(rng, ceiling * rng.uniform(0.3, 1.0)))
            ceiling += rng.random() * 4.0 / count
            parent_source = source
            if index % 10 == 0:
                store.log_event("elite", {"candidate": candidate_id, "island": index % 3})
            if index % 25 == 0:
                store.log_event("elapsed", {"elapsed_s": float(index) * 2})
        return store.path.parent  # status stays `running`: the driver was killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("generate")
    make.add_argument("--candidates", type=int, default=50_000)
    make.add_argument("--runs-dir", type=Path, required=True)
    measure = commands.add_parser("measure")
    measure.add_argument("--run", type=Path, required=True)
    measure.add_argument("--cache", choices=("warm", "cold"), default="warm")
    measure.add_argument("--repeats", type=int, default=3)
    measure.add_argument("--only", default="", help="comma-separated figures to take")
    measure.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.command == "generate":
        started = time.perf_counter()
        run_dir = generate(args.runs_dir, args.candidates)
        size_mb = (run_dir / DB_NAME).stat().st_size / 1e6
        print(json.dumps({"run": str(run_dir), "candidates": args.candidates,
                          "generate_s": round(time.perf_counter() - started, 1),
                          "run_db_mb": round(size_mb, 1)}))
        return
    from scale_measure import measure_all  # noqa: E402 (beside this file)

    figures = measure_all(args.run.resolve(), args.cache, args.repeats,
                          [name for name in args.only.split(",") if name])
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
