"""What a suite row's processes held on the GPU, against the task's sizes: a fit for lane sizing.

    python bench/lane_memory_fit.py RESULTS.jsonl --kb .kb [--max-elements 16777216] [--out FIT.json]
                                    [--gpu-gib 79]

Each row of a GPU suite run carries its oracle's and its worker's allocator
peaks (`gpu_peak_bytes`) and its lane's estimate (`lane_bytes`,
suite/footprint.py). This script rebuilds each row's task as the suite
judged it (the corpus's problems, shrunk as `suite_throughput.py` shrinks
them), measures on the meta device its input, output and parameter bytes
and the peak of its forward's live tensors (the intermediates the estimate
leaves out), fits each process's peak as a linear sum of those by least
squares, and prints the fit with each row's measured peak over the fitted
one and over the current estimate. Then it replays the pass: over the rows'
own spans on their lanes (a row's wall time up to its end), the most GPU
memory the rows judged at once would hold by their measured peaks, by the
lane's estimate and by the fit with and without a standby's copy, and how
long each sum stood above the GPU's `--gpu-gib`. Nothing runs on a GPU: it
reads recorded rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import weakref
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

GIB = float(1 << 30)
TERMS = ("fixed", "inputs", "outputs", "live", "parameters")


def forward_live_peak(module: Any) -> int:
    """The most bytes of tensors alive at once during one forward of the task on the meta
    device (inputs and parameters not counted), or -1 where the forward cannot run there."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Live(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live = self.peak = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            for value in out if isinstance(out, (list, tuple)) else [out]:
                if isinstance(value, torch.Tensor) and not value._is_view():
                    size = value.numel() * value.element_size()
                    self.live += size
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(value, self._free, size)
            return out

        def _free(self, size: int) -> None:
            self.live -= size

    try:
        with torch.device("meta"):
            inputs = list(module.get_inputs())
            model = module.Model(*module.get_init_inputs())
            with torch.no_grad(), _Live() as live:
                model(*inputs)
    except Exception:  # noqa: BLE001 - ops the meta device lacks
        return -1
    return live.peak


def sizes(path: str) -> dict[str, float]:
    """The task's terms, in GiB: one input set, its outputs, its forward's live peak, the
    parameters."""
    from kernelevo.suite.footprint import measure_footprint
    from kernelevo.suite.shrink import meta_module
    from kernelevo.task import load_task

    task = load_task(path)
    footprint = measure_footprint(task)
    live = forward_live_peak(meta_module(task))
    return {"fixed": 1.0, "inputs": footprint.input_bytes / GIB,
            "outputs": footprint.output_bytes / GIB, "live": max(live, 0) / GIB,
            "parameters": footprint.parameter_bytes / GIB}


def fit(rows: list[dict], terms: list[dict[str, float]], process: str) -> dict:
    """Least squares of one process's peak (GiB) on the terms; each row's measured/fitted."""
    import numpy

    matrix = numpy.array([[t[name] for name in TERMS] for t in terms])
    peaks = numpy.array([row["gpu_peak_bytes"][process] / GIB for row in rows])
    coefficients = numpy.linalg.lstsq(matrix, peaks, rcond=None)[0]
    ratios = peaks / numpy.maximum(matrix @ coefficients, 1e-9)
    return {"coefficients": dict(zip(TERMS, (round(float(c), 3) for c in coefficients))),
            "measured_over_fit_p10_p50_p90_max": [round(float(q), 2) for q in
                                                  numpy.percentile(ratios, [10, 50, 90, 100])],
            "ratios": [round(float(r), 3) for r in ratios]}


def replay(rows: list[dict], terms: list[dict[str, float]], coefficients: dict[str, float],
           gpu_gib: float) -> dict[str, Any]:
    """Sums over the rows judged at once (each from its end less its wall time, to its end):
    {name: (most GiB, seconds above gpu_gib)} for the measured peaks of oracle and worker,
    the lane's estimate, the fit plus the lane's CUDA contexts, and twice the fit (a standby
    holding what the evaluation holds)."""
    from kernelevo.suite.footprint import LANE_MIN_BYTES

    contexts = LANE_MIN_BYTES / GIB
    fitted = [sum(coefficients[name] * t[name] for name in TERMS) for t in terms]
    spans = [(row["ended_s"] - row["wall_s"], row["ended_s"]) for row in rows]
    ways = {
        "measured peaks (oracle + worker)": [sum(row["gpu_peak_bytes"][p] for p in
                                                 ("oracle", "worker")) / GIB for row in rows],
        "lane estimate (footprint.py)": [row.get("lane_bytes", 0) / GIB for row in rows],
        "fit + contexts": [f + contexts for f in fitted],
        "fit x 2 + contexts": [2 * f + contexts for f in fitted]}
    moments = sorted({t for span in spans for t in span})
    sums: dict[str, tuple[float, float]] = {}
    for name, sizes_gib in ways.items():
        most = above = 0.0
        for start, end in zip(moments, moments[1:]):
            middle = (start + end) / 2
            held = sum(size for size, (a, b) in zip(sizes_gib, spans) if a <= middle < b)
            most = max(most, held)
            above += (end - start) if held > gpu_gib else 0.0
        sums[name] = (round(most, 1), round(above, 1))
    return {"seconds": round(moments[-1] - moments[0], 1) if moments else 0.0, "sums": sums}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--kb", type=Path, required=True)
    parser.add_argument("--max-elements", type=int, default=1 << 24)
    parser.add_argument("--work", type=Path, default=Path("/tmp/lane_memory_fit"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--gpu-gib", type=float, default=79.0,
                        help="the GPU's memory for the replay (an H100 80GB frees about 79)")
    args = parser.parse_args()
    from kernelbench_batch import load_entries, prepare

    rows = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
    rows = [row for row in rows if row.get("gpu_peak_bytes", {}).get("worker")]
    if len(rows) < len(TERMS):
        sys.exit(f"{args.results}: {len(rows)} rows with GPU peaks, too few to fit")
    problems = prepare(load_entries(None, forward_only=True), args.kb, args.work,
                       args.max_elements)
    by_task = {Path(info["path"]).stem: info["path"] for info in problems.values()}
    kept = [row for row in rows if row["task"] in by_task]
    terms = [sizes(by_task[row["task"]]) for row in kept]
    result = {"rows": len(kept), **{p: fit(kept, terms, p) for p in ("oracle", "worker")}}
    both = [{**row, "gpu_peak_bytes": {"both": sum(row["gpu_peak_bytes"][p]
                                                     for p in ("oracle", "worker"))}}
            for row in kept]
    result["both"] = fit(both, terms, "both")
    over_estimate = sorted(both[i]["gpu_peak_bytes"]["both"] / row["lane_bytes"]
                           for i, row in enumerate(kept) if row.get("lane_bytes"))
    result["both_over_lane_estimate_p50_max"] = (
        [round(over_estimate[len(over_estimate) // 2], 2), round(over_estimate[-1], 2)]
        if over_estimate else None)
    result["largest"] = sorted(
        ({"task": row["task"], "oracle_gib": round(row["gpu_peak_bytes"]["oracle"] / GIB, 2),
          "worker_gib": round(row["gpu_peak_bytes"]["worker"] / GIB, 2),
          "lane_estimate_gib": round(row.get("lane_bytes", 0) / GIB, 2),
          **{k: round(v, 3) for k, v in t.items() if k != "fixed"}}
         for row, t in zip(kept, terms)), key=lambda r: -r["worker_gib"])[:8]
    result["replay"] = replay(kept, terms, result["both"]["coefficients"], args.gpu_gib)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    for process in ("oracle", "worker", "both"):
        part = result[process]
        print(f"{process}: peak GiB = " + " + ".join(
            f"{c} x {name}" for name, c in part["coefficients"].items())
            + f"; measured/fit p10 p50 p90 max {part['measured_over_fit_p10_p50_p90_max']}")
    print(f"oracle and worker over the lane's whole estimate, median and max: "
          f"{result['both_over_lane_estimate_p50_max']} ({len(kept)} rows)")
    for row in result["largest"]:
        print(f"  {row}")
    print(f"the pass replayed ({result['replay']['seconds']} s, rows' own spans), GiB held at "
          f"once at most, and seconds above {args.gpu_gib:g} GiB:")
    for name, (most, above) in result["replay"]["sums"].items():
        print(f"  {name}: {most} GiB, {above} s")


if __name__ == "__main__":
    main()
