"""The example block end to end on a GPU: original against patched with the attention kernel.

    python bench/model_e2e_accept.py --out DIR [--sizes a,b] [--precisions fp32,fp16]
                                     [--modes eager,compile] [--kernels attn] [--rounds 10]

For each size (examples/model_block/block.py's module constants scaled up,
the sequence long against the width so that attention weighs most) and
precision, the block is built and profiled on the GPU (the attention's share
of the forward is reported), its `--kernels` groups are extracted as tasks
and the example's kernels for them applied as `kernelevo model apply` does
(each checked against the original first). The patched model's output is
compared with the original's on the example input, then both are timed,
eagerly and under torch.compile (inductor): after a warm-up (the compile
included), `--rounds` rounds (10), original and patched interleaved round by
round, each round a loop of calls between two CUDA events (about 50 ms of
calls). A contestant's time is the median of its
rounds' per-call times (ms). Each configuration runs in try/except, so one
failure is recorded and the rest still run. Prints a Markdown table and
writes DIR/model_e2e_accept.json and DIR/model_e2e_accept.md; exits 1 if
any configuration failed. About a minute on an H100 (mostly torch.compile's
compiles); without a CUDA GPU it exits 2 at once.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

# Module constants of block.py; dim // heads = 64 in both, as in most transformers.
SIZES = {
    "seq1024": {"batch_size": 4, "seq_len": 1024, "dim": 512, "heads": 8},
    "seq4096": {"batch_size": 1, "seq_len": 4096, "dim": 512, "heads": 8},
}
DEVICE = "cuda"
ROUND_TARGET_MS = 50.0  # calls per round chosen to fill about this much GPU time
MAX_CALLS_PER_ROUND = 200


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON and table")
    parser.add_argument("--sizes", default=",".join(SIZES), help=f"of {', '.join(SIZES)}")
    parser.add_argument("--precisions", default="fp32,fp16")
    parser.add_argument("--modes", default="eager,compile")
    parser.add_argument("--kernels", default="attn",
                        help="tasks to patch, from examples/model_block/kernels (attn,ln1,...)")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    unknown = set(args.sizes.split(",")) - set(SIZES)
    if unknown:
        parser.error(f"unknown sizes {sorted(unknown)}: choose from {', '.join(SIZES)}")
    return args


def require_gpu() -> str:
    """The GPU's name; exits 2 with the reason when this machine cannot run the bench."""
    import torch

    problem = ""
    if os.environ.get("TRITON_INTERPRET") == "1":
        problem = ("TRITON_INTERPRET=1 is set, so Triton kernels would run on the host: unset "
                   "it")
    elif not torch.cuda.is_available():
        problem = (f"no CUDA GPU (torch.cuda.is_available() is False, torch "
                   f"{torch.__version__}): run it on a machine with one")
    if problem:
        print(f"model_e2e_accept: this bench times kernels on a GPU; {problem}", file=sys.stderr)
        sys.exit(2)
    return torch.cuda.get_device_name()


def prepare_size(out: Path, name: str, kernels: tuple[str, ...]) -> dict[str, Any]:
    """The scaled model file, its tasks (extracted from an fp32 GPU profile) and kernels."""
    from kernelevo.model.extract import extract, select_hot
    from kernelevo.model.profile import profile_model
    from model_e2e import retargeted_kernels, scaled_model

    folder = out / name
    path = scaled_model(folder, SIZES[name])
    profile = profile_model(str(path), device=DEVICE, precision="fp32", repeats=2)
    spots = select_hot(profile, len(kernels), keep=lambda spot: spot.name in kernels)
    tasks_dir = extract(profile, spots, folder / "tasks")
    return {"path": path, "tasks": tasks_dir,
            "kernels": retargeted_kernels(folder, tasks_dir, tuple(s.name for s in spots))}


def attention_share(path: Path, precision: str) -> float | None:
    """The attention submodule's share of the original forward's GPU time."""
    from kernelevo.model.profile import profile_model

    profile = profile_model(str(path), device=DEVICE, precision=precision, repeats=2)
    return next((s.share for s in profile.modules if s.path == "attn"), None)


def patched_pair(prepared: dict[str, Any], precision: str) -> dict[str, Any]:
    """The original and the patched model in `precision`, the example input and the check."""
    import torch

    from kernelevo.config import DEFAULT_TOLERANCES
    from kernelevo.evaluate.analysis.tolerance import compare_tensor
    from kernelevo.model.apply import apply
    from kernelevo.model.contract import build_model, dtype_of, model_file, moved

    built = moved(build_model(model_file(prepared["path"])), DEVICE, dtype_of(precision))
    original = copy.deepcopy(built.module).eval()
    applied = apply(built.module.eval(), prepared["kernels"], tasks=prepared["tasks"])
    x = built.inputs[0]
    with torch.no_grad():
        expected, got = original(x), built.module(x)
    atol, rtol = DEFAULT_TOLERANCES[str(expected.dtype).removeprefix("torch.")]
    check = compare_tensor(got, expected, atol, rtol)
    return {"original": original, "patched": built.module, "input": x,
            "swapped": [s.path for s in applied.swapped],
            "skipped": [f"{s.path}: {s.reason}" for s in applied.skipped],
            "correct": check.reason is None, "check": check.message or "match",
            "max_abs_error": (check.metrics.max_abs_error if check.metrics else None)}


def calls_per_round(call: Callable[[], Any]) -> int:
    """Enough calls to fill about ROUND_TARGET_MS of GPU time, from a short trial."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        call()
    end.record()
    end.synchronize()
    per_call_ms = max(start.elapsed_time(end) / 3, 1e-3)
    return int(min(MAX_CALLS_PER_ROUND, max(3, ROUND_TARGET_MS / per_call_ms)))


def timed_round(call: Callable[[], Any], calls: int) -> float:
    """ms per call over `calls` back-to-back calls, between two CUDA events."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def time_mode(pair: dict[str, Any], mode: str, rounds: int) -> dict[str, Any]:
    """Original and patched in one mode, rounds interleaved; medians in ms."""
    import torch

    models = {"original": pair["original"], "patched": pair["patched"]}
    if mode == "compile":
        models = {name: torch.compile(model) for name, model in models.items()}
    x = pair["input"]
    calls: dict[str, Callable[[], Any]] = {name: (lambda m=model: m(x))
                                           for name, model in models.items()}
    warmup_s: dict[str, float] = {}
    with torch.no_grad():
        for name, call in calls.items():
            started = time.perf_counter()
            for _ in range(3):  # the compile, then the kernels' first launches
                call()
            torch.cuda.synchronize()
            warmup_s[name] = round(time.perf_counter() - started, 2)
        counts = {name: calls_per_round(call) for name, call in calls.items()}
        samples: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(rounds):
            for name, call in calls.items():
                samples[name].append(timed_round(call, counts[name]))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {"original_ms": medians["original"], "patched_ms": medians["patched"],
            "speedup": medians["original"] / medians["patched"],
            "samples_ms": samples, "calls_per_round": counts, "warmup_s": warmup_s}


def run_configuration(prepared: dict[str, Any], size: str, precision: str,
                      modes: list[str], rounds: int) -> list[dict[str, Any]]:
    """Rows of one size and precision: one per mode, or one that says what failed."""
    import torch

    base = {"size": size, **SIZES[size], "precision": precision}
    try:
        share = attention_share(prepared["path"], precision)
        pair = patched_pair(prepared, precision)
    except Exception as exc:  # noqa: BLE001 - recorded, and the other configurations go on
        return [{**base, "error": _error(exc)}]
    base.update(attention_share=share, swapped=pair["swapped"], skipped=pair["skipped"],
                correct=pair["correct"], check=pair["check"],
                max_abs_error=pair["max_abs_error"])
    rows = []
    for mode in modes:
        try:
            rows.append({**base, "mode": mode, **time_mode(pair, mode, rounds)})
        except Exception as exc:  # noqa: BLE001
            rows.append({**base, "mode": mode, "error": _error(exc)})
        finally:
            torch._dynamo.reset()
    del pair
    torch.cuda.empty_cache()
    return rows


def _error(exc: BaseException) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    print("".join(lines[-6:]), file=sys.stderr, flush=True)
    return f"{type(exc).__name__}: {exc}"[:2000]


def markdown(rows: list[dict[str, Any]], gpu: str) -> str:
    lines = [f"Example block end to end on {gpu}: median ms per forward (CUDA events)\n",
             "| size (batch x seq, dim, heads) | precision | mode | attn share | original ms "
             "| patched ms | speedup | outputs | swapped |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        size = row["size"]
        if "seq_len" in row:
            size += f" ({row['batch_size']}x{row['seq_len']}, {row['dim']}, {row['heads']})"
        share = f"{row['attention_share']:.1%}" if row.get("attention_share") else "-"
        if "error" in row and "original_ms" not in row:
            lines.append(f"| {size} | {row['precision']} | {row.get('mode', '-')} | {share} "
                         f"| - | - | - | failed: {row['error'][:120]} | - |")
            continue
        outputs = "match" if row["correct"] else f"DIFFER ({row['check'][:80]})"
        lines.append(f"| {size} | {row['precision']} | {row['mode']} | {share} "
                     f"| {row['original_ms']:.3f} | {row['patched_ms']:.3f} "
                     f"| {row['speedup']:.2f}x | {outputs} | {', '.join(row['swapped']) or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    gpu = require_gpu()
    import torch
    import triton

    args.out.mkdir(parents=True, exist_ok=True)
    kernels = tuple(args.kernels.split(","))
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for size in args.sizes.split(","):
        try:
            prepared = prepare_size(args.out, size, kernels)
        except Exception as exc:  # noqa: BLE001
            rows.append({"size": size, **SIZES.get(size, {}), "precision": "-",
                         "error": _error(exc)})
            continue
        for precision in args.precisions.split(","):
            done = run_configuration(prepared, size, precision, args.modes.split(","),
                                     args.rounds)
            print(markdown(done, gpu), flush=True)
            rows += done
    table = markdown(rows, gpu)
    summary = {"command": " ".join([sys.executable, *sys.argv]), "gpu": gpu,
               "torch": torch.__version__, "triton": triton.__version__,
               "kernels": list(kernels), "rounds": args.rounds,
               "round_target_ms": ROUND_TARGET_MS,
               "wall_s": round(time.perf_counter() - started, 1), "rows": rows}
    (args.out / "model_e2e_accept.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "model_e2e_accept.md").write_text(table)
    print(table, flush=True)
    print(f"wall {summary['wall_s']} s; written {args.out / 'model_e2e_accept.json'}")
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
