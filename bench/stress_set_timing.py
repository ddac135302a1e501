"""Does a reference's time depend on the input values? Normal sets against stress sets.

    python3 bench/stress_set_timing.py --out DIR [--kernelbench DIR/level1]

The judge rotates its input sets through the timed calls, and one of them is
a stress set (inputs rescaled by 32-128 and shifted, inputs.stress_tensor).
For each task this times the eager reference and its torch.compile with
triton.testing.do_bench (median, an independent timer) on two sets of the
task's own distribution and on stress sets at scales 32, 64 and 128, made by
the judge's own input code. A kernel whose time moves with the values shows
it as a ratio away from 1. Writes DIR/stress_set_timing.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

EXAMPLES = ["softmax", "gelu", "layernorm"]
KERNELBENCH = ["19_ReLU", "21_Sigmoid", "22_Tanh", "23_Softmax", "24_LogSoftmax", "26_GELU_",
               "27_SELU_", "29_Softplus", "31_ELU", "36_RMSNorm_", "40_LayerNorm",
               "88_MinGPTNewGelu", "95_CrossEntropyLoss", "1_Square_matrix_multiplication_"]
SCALES = (32.0, 64.0, 128.0)


def tasks(kernelbench: Path | None) -> list[tuple[str, Path]]:
    found = [(name, ROOT / "examples" / name / "task.py") for name in EXAMPLES]
    if kernelbench is not None:
        for stem in KERNELBENCH:
            path = kernelbench / f"{stem}.py"
            if path.exists():
                found.append((f"kb/{stem}", path))
    return found


def times(path: Path) -> dict[str, dict[str, float]]:
    import torch
    import triton.testing

    from kernelevo.evaluate.shared.inputs import build_model, import_source, make_inputs

    folder = Path("/tmp/ke-stress-timing")
    folder.mkdir(exist_ok=True)
    module = import_source(path.read_text(), f"stress_{abs(hash(str(path)))}", folder)
    model = build_model(module.Model, list(module.get_init_inputs()), "cuda", torch.float32)
    contestants = {"eager": model, "compile": torch.compile(model)}
    sets = {"normal_a": make_inputs(module, 11, "cuda", torch.float32),
            "normal_b": make_inputs(module, 12, "cuda", torch.float32)}
    for scale in SCALES:
        sets[f"stress_{int(scale)}"] = make_inputs(module, 13, "cuda", torch.float32, scale)
    out: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for name, fn in contestants.items():
            fn(*sets["normal_a"])  # compiles
            out[name] = {label: triton.testing.do_bench(lambda v=values, f=fn: f(*v),
                                                        return_mode="median")
                         for label, values in sets.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kernelbench", type=Path, default=None)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    header = f"{'task':34} {'who':8} {'normal a':>9} {'normal b':>9} " + " ".join(
        f"{'x' + str(int(s)):>9}" for s in SCALES) + "  worst stress/normal"
    print(header, flush=True)
    for name, path in tasks(args.kernelbench):
        try:
            results[name] = times(path)
        except Exception as exc:  # a task this probe cannot run is reported, not fatal
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            print(f"{name:34} error {results[name]['error']}", flush=True)
            continue
        for who, by_set in results[name].items():
            normal = (by_set["normal_a"] + by_set["normal_b"]) / 2
            worst = max(by_set[f"stress_{int(s)}"] for s in SCALES) / normal
            cells = " ".join(f"{by_set[label]:9.4f}" for label in by_set)
            print(f"{name:34} {who:8} {cells}  {worst:.2f}", flush=True)
    (args.out / "stress_set_timing.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
