"""Model in, faster model out, end to end on the example block: profile, extract, judge
each hand-written kernel against its task, apply, verify (eager and torch.compile).

    python bench/model_e2e.py --out /tmp/out/model_e2e --batch 8 --seq 1024 --dim 1024 --heads 16

The block (examples/model_block/block.py) is copied with the sizes given; the
kernels in examples/model_block/kernels are copied beside it, their import of
the model's copy renamed to the scaled copy's. Writes profile.json, tasks/,
kernels/, verdicts.json, model_report.{json,md} and model_e2e.json to --out.
Without a GPU the times are CPU times under the Triton interpreter.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples/model_block"
KERNEL_TASKS = ("ln1", "mlp_gelu", "attn_softmax")  # the tasks with hand-written kernels


def scaled_model(out: Path, sizes: dict[str, int]) -> Path:
    from kernelevo.task import replace_constants

    path = out / "model" / "block.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(replace_constants((EXAMPLE / "block.py").read_text(), sizes))
    return path


def retargeted_kernels(out: Path, tasks_dir: Path, names: tuple[str, ...] = KERNEL_TASKS) -> Path:
    """The example's kernels, importing the scaled model's copy instead of the example's."""
    copy_name = json.loads((tasks_dir / "manifest.json").read_text())["model_source"][:-3]
    kernels = out / "kernels"
    kernels.mkdir(exist_ok=True)
    for name in names:
        text = (EXAMPLE / "kernels" / f"{name}.py").read_text()
        (kernels / f"{name}.py").write_text(re.sub(r"_model_block_[0-9a-f]{10}", copy_name, text))
    return kernels


def judge_kernels(tasks_dir: Path, kernels: Path, device: str, precision: str) -> dict:
    import kernelevo

    verdicts = {}
    for name in KERNEL_TASKS:
        started = time.perf_counter()
        verdict = kernelevo.evaluate(tasks_dir / f"{name}.py", kernels / f"{name}.py",
                                     device=device, precision=precision)
        verdicts[name] = {"status": verdict.status, "reason": verdict.reason,
                          "speedup_vs_eager": verdict.speedup_vs_eager,
                          "speedup_vs_compile": verdict.speedup_vs_compile,
                          "timing_measure": verdict.timing_measure,
                          "timings": {k: vars(v) for k, v in verdict.timings.items()},
                          "flags": list(verdict.flags), "notes": list(verdict.notes),
                          "wall_s": round(time.perf_counter() - started, 1)}
        print(f"judged {name}: {verdict.status}/{verdict.reason} "
              f"vs eager {verdict.speedup_vs_eager} vs compile {verdict.speedup_vs_compile}",
              flush=True)
    return verdicts


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--device", default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--compile-backend", default=None)
    parser.add_argument("--no-judge", action="store_true", help="skip judging each kernel")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():  # before anything imports triton (apply.py says why)
        os.environ["TRITON_INTERPRET"] = "1"

    from kernelevo.model.apply import apply
    from kernelevo.model.contract import build_model, default_device, dtype_of, model_file, \
        moved
    from kernelevo.model.extract import extract, select_hot
    from kernelevo.model.profile import profile_model, profile_table
    from kernelevo.model.report import report_data, write_report
    from kernelevo.model.verify import verify

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    device = args.device or default_device()
    sizes = {"batch_size": args.batch, "seq_len": args.seq, "dim": args.dim, "heads": args.heads}
    path = scaled_model(out, sizes)
    started = time.perf_counter()
    profile = profile_model(str(path), device=device, precision=args.precision)
    (out / "profile.json").write_text(json.dumps(profile.to_dict(), indent=2))
    for row in profile_table(profile):
        print("  ".join(row), flush=True)
    spots = select_hot(profile, 10, leaves=True)
    tasks_dir = extract(profile, spots, out / "tasks")
    kernels = retargeted_kernels(out, tasks_dir)
    verdicts = {} if args.no_judge else judge_kernels(tasks_dir, kernels, device, args.precision)
    (out / "verdicts.json").write_text(json.dumps(verdicts, indent=2))
    built = moved(build_model(model_file(path)), device, dtype_of(args.precision))
    original = copy.deepcopy(built.module)
    applied = apply(built.module, kernels, tasks=tasks_dir)
    verification = verify(original, built.module, built.inputs, device=device,
                          compile_backend=args.compile_backend, rounds=args.rounds)
    data = report_data(profile.to_dict(), applied.to_dict(), verification.to_dict(), verdicts)
    write_report(out, data)
    summary = {"command": " ".join([sys.executable, *sys.argv]), "sizes": sizes,
               "device": device, "precision": args.precision,
               "swapped": [s.path for s in applied.swapped],
               "correct": verification.correct, "max_abs_error": verification.max_abs_error,
               "graph_breaks": verification.graph_breaks,
               "kernel_ops_in_graph": verification.kernel_ops_in_graph,
               "speedup_eager": verification.speedup_eager,
               "speedup_compile": verification.speedup_compile,
               "timings_ms": {k: [v.median_ms, v.iqr_ms] for k, v in
                              verification.timings.items()},
               "clock": verification.clock, "wall_s": round(time.perf_counter() - started, 1)}
    (out / "model_e2e.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2), flush=True)
    return summary


if __name__ == "__main__":
    main()
