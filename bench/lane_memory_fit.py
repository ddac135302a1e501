"""What a suite row's processes held on the GPU, against the task's sizes: the fit lanes are sized by.

    python bench/lane_memory_fit.py RESULTS.jsonl [RESULTS.jsonl ...] --kb .kb
                                    [--max-elements 16777216] [--out FIT.json] [--gpu-gib 79]

Each row of a GPU suite run carries its processes' allocator peaks
(`gpu_peak_bytes`: the oracle's and the worker's, and since session 37 the
re-check's two) and its lane's size (`lane_bytes`). This script rebuilds
each row's task as the suite judged it (the corpus's problems, shrunk as
`suite_throughput.py` shrinks them), measures on the meta device one input
set, its outputs, the forward's intermediates at their peak and the
parameters (suite/footprint.py's `measure_footprint`), and fits by least
squares, over the rows of every file given, the evaluation's two processes
together (`session`) and the re-check's two (`recheck`): the constants
`SESSION_FIT` and `RECHECK_FIT` in suite/footprint.py are this fit over
sessions 31 and 37's passes. Each process alone is fitted too, and each
fit is also made on the first file alone and tried on the others (how it
holds on another machine's pass). Then each pass is replayed: over its rows'
own spans on their lanes (a row's wall time up to its end), the most GPU
memory the rows judged at once held by their measured peaks (with each
lane's contexts), by the lane sizes the pass had, and by the size the suite
gives now from the task's sizes, and the seconds each sum stood above the
GPU's `--gpu-gib`, beside when the rows that ran out of memory began.
Nothing runs on a GPU: it reads recorded rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

GIB = float(1 << 30)
TERMS = ("fixed", "inputs", "outputs", "live", "parameters")
PARTS = {"oracle": ("oracle",), "worker": ("worker",), "session": ("oracle", "worker"),
         "recheck": ("recheck_oracle", "recheck_worker")}


def sizes(path: str) -> dict[str, float]:
    """The task's terms, in GiB: one input set, its outputs, its forward's live peak, the
    parameters (and 1 for the fixed part)."""
    from kernelevo.suite.footprint import measure_footprint
    from kernelevo.task import load_task

    footprint = measure_footprint(load_task(path))
    return {"fixed": 1.0, "inputs": footprint.input_bytes / GIB,
            "outputs": footprint.output_bytes / GIB, "live": footprint.live_bytes / GIB,
            "parameters": footprint.parameter_bytes / GIB}


def held(row: dict, part: str) -> float:
    """GiB the row's processes of `part` held at their peaks (0 where not recorded)."""
    peaks = row.get("gpu_peak_bytes") or {}
    return sum(peaks.get(name, 0) for name in PARTS[part]) / GIB


def fit(rows: list[dict], terms: list[dict[str, float]], part: str) -> dict:
    """Least squares of `part`'s peak (GiB) on the terms, over the rows that recorded it."""
    import numpy

    kept = [(row, t) for row, t in zip(rows, terms) if held(row, part) > 0]
    matrix = numpy.array([[t[name] for name in TERMS] for _, t in kept])
    peaks = numpy.array([held(row, part) for row, _ in kept])
    coefficients = numpy.linalg.lstsq(matrix, peaks, rcond=None)[0]
    found = {"rows": len(kept),
             "coefficients": dict(zip(TERMS, (round(float(c), 3) for c in coefficients)))}
    return {**found, **tried(found["coefficients"], [row for row, _ in kept],
                             [t for _, t in kept], part)}


def tried(coefficients: dict[str, float], rows: list[dict], terms: list[dict[str, float]],
          part: str) -> dict:
    """How the measured peaks stand against the fitted ones on these rows."""
    import numpy

    fitted = numpy.array([sum(coefficients[n] * t[n] for n in TERMS) for t in terms])
    peaks = numpy.array([held(row, part) for row in rows])
    ratios = peaks / numpy.maximum(fitted, 1e-9)
    return {"measured_over_fit_p10_p50_p90_max": [round(float(q), 2) for q in
                                                  numpy.percentile(ratios, [10, 50, 90, 100])],
            "at_or_under_fit": int((peaks <= fitted).sum())}


def suite_size(terms: dict[str, float]) -> float:
    """The lane's size in GiB, as the suite gives it now from these sizes (one session)."""
    from kernelevo.suite.footprint import Footprint

    footprint = Footprint(*(int(terms[name] * GIB) for name in
                            ("inputs", "outputs", "parameters", "live")))
    return footprint.lane_bytes() / GIB


def replay(rows: list[dict], terms: list[dict[str, float]], gpu_gib: float) -> dict[str, Any]:
    """Sums over the rows judged at once (each from its end less its wall time, to its end):
    {name: (most GiB, seconds above gpu_gib)} for the rows' measured peaks with their lanes'
    contexts, the lane sizes the pass had, and the size the suite gives now."""
    from kernelevo.suite.footprint import CONTEXT_BYTES, LANE_PROCESSES

    contexts = LANE_PROCESSES * CONTEXT_BYTES / GIB
    spans = [(row["ended_s"] - row["wall_s"], row["ended_s"]) for row in rows]
    ways = {
        "measured peaks + contexts": [sum(held(row, p) for p in ("session", "recheck"))
                                      + contexts for row in rows],
        "the pass's lane sizes": [row.get("lane_bytes", 0) / GIB for row in rows],
        # the re-check counted on every row: a suite runs it by default, recorded or not
        "the suite's size now (footprint.py)": [suite_size(t) for t in terms]}
    moments = sorted({t for span in spans for t in span})
    sums: dict[str, dict[str, Any]] = {}
    for name, sizes_gib in ways.items():
        most = above = 0.0
        stretches: list[list[float]] = []
        for start, end in zip(moments, moments[1:]):
            middle = (start + end) / 2
            total = sum(size for size, (a, b) in zip(sizes_gib, spans) if a <= middle < b)
            most = max(most, total)
            if total > gpu_gib:
                above += end - start
                if stretches and stretches[-1][1] == round(start, 1):
                    stretches[-1][1] = round(end, 1)
                else:
                    stretches.append([round(start, 1), round(end, 1)])
        sums[name] = {"most_gib": round(most, 1), "seconds_above": round(above, 1),
                      "stretches_above_s": stretches}
    return {"seconds": round(moments[-1] - moments[0], 1) if moments else 0.0, "sums": sums,
            "judged_alone_from_s": [round(row["ended_s"] - row["wall_s"], 1)
                                    for row in rows if row.get("judged_alone")]}


def corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """The recorded passes, and how their tasks are rebuilt (this script's and order_replay's)."""
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--kb", type=Path, required=True)
    parser.add_argument("--max-elements", type=int, default=1 << 24)
    parser.add_argument("--work", type=Path, default=Path("/tmp/lane_memory_fit"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--gpu-gib", type=float, default=79.0,
                        help="the GPU's memory for the replay (an H100 80GB frees about 79)")


def task_paths(args: argparse.Namespace) -> dict[str, str]:
    """Each task's file by its name in the rows, shrunk as the suite's passes judged it."""
    from kernelbench_batch import load_entries, prepare

    problems = prepare(load_entries(None, forward_only=True), args.kb, args.work,
                       args.max_elements)
    return {Path(info["path"]).stem: info["path"] for info in problems.values()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    corpus_arguments(parser)
    args = parser.parse_args()
    by_task = task_paths(args)
    cache: dict[str, dict[str, float]] = {}
    passes = []
    for path in args.results:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        rows = [row for row in rows if held(row, "worker") > 0 and row["task"] in by_task]
        for row in rows:
            cache.setdefault(row["task"], sizes(by_task[row["task"]]))
        passes.append((path, rows, [cache[row["task"]] for row in rows]))
    rows = [row for _, found, _ in passes for row in found]
    terms = [t for _, _, found in passes for t in found]
    if len(rows) < len(TERMS):
        sys.exit(f"{len(rows)} rows with GPU peaks, too few to fit")
    result: dict[str, Any] = {"rows": len(rows), "files": [str(p) for p, *_ in passes]}
    result["fits"] = {part: fit(rows, terms, part) for part in PARTS
                      if sum(1 for row in rows if held(row, part) > 0) >= len(TERMS)}
    first, first_rows, first_terms = passes[0]
    if len(passes) > 1 and len(first_rows) >= len(TERMS):
        on_first = fit(first_rows, first_terms, "session")
        result["session_fit_on_the_first_tried_on_each"] = {
            "coefficients": on_first["coefficients"],
            **{str(path): tried(on_first["coefficients"], found, found_terms, "session")
               for path, found, found_terms in passes[1:]}}
    result["replays"] = {str(path): replay(found, found_terms, args.gpu_gib)
                         for path, found, found_terms in passes}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    for part, found in result["fits"].items():
        print(f"{part} ({found['rows']} rows): peak GiB = " + " + ".join(
            f"{c} x {name}" for name, c in found["coefficients"].items())
            + f"; measured/fit p10 p50 p90 max {found['measured_over_fit_p10_p50_p90_max']}")
    for path, found in (result.get("session_fit_on_the_first_tried_on_each") or {}).items():
        if path != "coefficients":
            print(f"session fit on {first} alone, tried on {path}: {found}")
    for path, played in result["replays"].items():
        print(f"{path} replayed ({played['seconds']} s, rows' own spans): GiB held at once at "
              f"most, seconds above {args.gpu_gib:g} GiB; rows run again alone from "
              f"{played['judged_alone_from_s']} s")
        for name, found in played["sums"].items():
            print(f"  {name}: {found['most_gib']} GiB, {found['seconds_above']} s "
                  f"{found['stretches_above_s']}")


if __name__ == "__main__":
    main()
