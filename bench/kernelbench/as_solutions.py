"""Lay the corpus out as KernelBench writes solutions, for `kernelevo suite --solutions`.

    python3 bench/kernelbench/as_solutions.py DIR [--honest-only]

Honest kernels become sample 0 of their problem, bad variants samples 1, 2, ...
"""

import argparse
import shutil
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--honest-only", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    samples: dict[str, int] = {}
    entries = tomllib.loads((HERE / "manifest.toml").read_text())["candidate"]
    for entry in sorted(entries, key=lambda e: e["kind"] != "honest"):
        if args.honest_only and entry["kind"] != "honest":
            continue
        if "--backward" in entry.get("eval_args", []):  # a suite judges KernelBench's forwards
            continue
        level, problem = entry["problem"].removeprefix("level").split("/")
        sample = samples.setdefault(entry["problem"], 0)
        samples[entry["problem"]] += 1
        shutil.copy(HERE / "candidates" / entry["file"],
                    args.out / f"level_{level}_problem_{problem}_sample_{sample}_kernel.py")
    print(f"{sum(samples.values())} solutions for {len(samples)} problems in {args.out}")


if __name__ == "__main__":
    main()
