"""Where a suite's time went: its first row, its verdicts' phases and its lanes' own waits.

Each verdict carries its phases (`phases_s`: seconds in the worker's start,
the baselines' compile, the build, the checks, the timing, the waits for the
GPU's timing gate...); each row its waits for a build ahead and for a run
alone; each lane its waits for GPU memory and its idle end. Summed over the
rows they say where the suite's time went (`suite.json`'s `time_spent`,
printed by `kernelevo suite --verbose`). Phases of one row can overlap (a
standby's warm-up runs beside the evaluation before it), and lanes run side
by side: the sums are seconds of work, not of the suite's wall clock.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

# The phases summed, by the name shown, from the verdicts' own names. Steps
# inside a phase (timing_*, gate_wait_*, recheck_*) are left out: counted in it.
PHASE_GROUPS: dict[str, tuple[str, ...]] = {
    "worker start": ("worker_start",),
    "compile baselines": ("compile_baseline",),
    "builds (in the worker)": ("build",),
    "reference": ("reference_wait",),
    "checks": ("setup", "load", "first_call", "correctness", "judging", "trivial_check"),
    # inside the checks, and shown apart: the judge's comparisons of the outputs, and
    # of them the worker's outputs opened, the comparisons made again in smaller chunks,
    # then on the CPU (the GPU's memory full)
    "the judge's decisions (of the checks)": ("decide",),
    "the worker's outputs opened for them": ("decide_outputs",),
    "their comparisons of the outputs": ("decide_correctness",),
    "their honesty checks": ("decide_honesty",),
    "their wait for the reference's trivial answers": ("decide_trivial",),
    "decisions in smaller chunks": ("decide_small_chunks",),
    "decisions on the CPU": ("decide_cpu",),
    "timing": ("timing", "profile"),
    # a timing's wait, and the warm-up's for its first kernels, its compiled
    # model's first run (a standby's yield, warmup_yield, is inside it) and its
    # store timing, and the worker's for its hold once given its candidates (a
    # warm one waits behind the timings queued): seconds of no work, apart from
    # the steps they interrupt
    "waits for the GPU's timing gate": ("gate_wait", "warmup_gpu_wait",
                                        "warmup_compile_gpu_wait", "warmup_store_gate_wait",
                                        "ready_gate_wait"),
    "re-check at other sizes": ("shape_variation",),
    "process exits": ("exit", "oracle_exit"),
    # a job stopped while another lane's calls were timed (sandbox/quiet.py): inside
    # whichever phase it was in, shown apart as what the quiet host cost
    "stood still for other lanes' call timing": ("stood_still", "oracle_stood_still"),
}

# A row's path on its lane, in turn (evaluate/parent/session.py's PATH): what
# each row waited on, so these add up to the rows' wall time (with "the rest":
# static checks, build waits, the re-check's verdicts, the judge's own work).
PATH_GROUPS: dict[str, str] = {
    "the worker's warm-up left": "path_warmup_left",
    "checks": "path_checks",
    "the GPU's timing gate": "path_gate_wait",
    "timing": "path_timing",
    "profile and process exits": "path_to_exit",
    "the re-check at other sizes": "shape_variation",
}


# A worker's start, step by step (the first row's, printed apart): what its
# "worker start" phase holds, in turn; what these leave of it is waits.
START_STEPS: dict[str, tuple[str, ...]] = {
    "waiting for the forkserver's imports": ("warmup_forkserver_wait",),
    "the process's start": ("warmup_process_start",),
    "its sandbox": ("warmup_sandbox",),
    "the task's import": ("warmup_task_import",),
    "its CUDA context": ("warmup_cuda_init",),
    "the baselines' model and inputs": ("warmup_model_inputs",),
    "torch.compile's compile": ("compile_baseline",),
    "the GPU's gate": ("warmup_gpu_wait", "warmup_compile_gpu_wait"),
    "the stored baselines": ("warmup_baselines_store",),
}


@dataclass
class LaneStats:
    """One lane's own waits, in seconds since the suite's start where a time."""

    lane: int
    gpu_index: int | None
    memory_wait_s: float = 0.0  # for a task that fits in the GPU's free memory
    head_start_wait_s: float = 0.0  # for its GPU's first lane's first row, at the start
    ended_at_s: float | None = None  # no task left for it
    rows: int = 0


@dataclass
class LaneRecord:
    """What the lanes did, for the suite's account of its time (suite/time_spent.py)."""

    started: float = field(default_factory=time.monotonic)
    lanes: list[LaneStats] = field(default_factory=list)
    first_row_at_s: float | None = None
    # The suite's steps before its first row, each when it was done (seconds since the start)
    marks: dict[str, float] = field(default_factory=dict)

    def since_start(self) -> float:
        return time.monotonic() - self.started

    def mark(self, step: str) -> None:
        """Note when `step` was first done, for the account of the time to the first row."""
        self.marks.setdefault(step, round(self.since_start(), 3))


def time_spent(rows: list[dict[str, Any]], record: Any, wall_s: float) -> dict[str, Any]:
    """The account of one suite's run: `rows` it judged, its lanes' `record` (lanes.py)."""
    phases = {name: round(sum(_phase(row, keys) for row in rows), 2)
              for name, keys in PHASE_GROUPS.items()}
    ends = [lane.ended_at_s for lane in record.lanes if lane.ended_at_s is not None]
    lanes = {
        "build waits": round(sum(row.get("build_wait_s") or 0.0 for row in rows), 2),
        "waits for GPU memory": round(sum(lane.memory_wait_s for lane in record.lanes), 2),
        "head start of the first lane": round(sum(lane.head_start_wait_s
                                                  for lane in record.lanes), 2),
        "waits for a run alone": round(sum(row.get("alone_wait_s") or 0.0 for row in rows), 2),
        "idle at the end": round(sum(max(0.0, wall_s - end) for end in ends), 2),
    }
    path = {name: round(sum(_phase(row, (key,)) for row in rows), 2)
            for name, key in PATH_GROUPS.items()}
    path["the rest"] = round(sum(max(0.0, (row.get("wall_s") or 0.0) - sum(
        _phase(row, (key,)) for key in PATH_GROUPS.values())) for row in rows), 2)
    first = next(iter(rows), None)
    return {
        "wall_s": round(wall_s, 2), "lanes": len(record.lanes), "rows": len(rows),
        "host_probe_us": _median_probe(rows),
        "quiet": _quiet(rows),
        "rows_wall_s": round(sum(row.get("wall_s") or 0.0 for row in rows), 2),
        "first_row_s": None if record.first_row_at_s is None else round(record.first_row_at_s,
                                                                          2),
        "steps_s": dict(getattr(record, "marks", {})),
        "first_row": None if first is None else {
            "task": first["task"], "sample": first["sample"], "wall_s": first.get("wall_s"),
            "phases_s": first.get("phases_s", {})},
        "phases_s": phases, "path_s": path, "lane_waits_s": lanes,
        "per_lane": [{"lane": lane.lane, "gpu_index": lane.gpu_index, "rows": lane.rows,
                      "memory_wait_s": round(lane.memory_wait_s, 2),
                      "head_start_wait_s": round(lane.head_start_wait_s, 2),
                      "ended_at_s": None if lane.ended_at_s is None else round(
                          lane.ended_at_s, 2)} for lane in record.lanes]}


def _median_probe(rows: list[dict[str, Any]]) -> float | None:
    """The median of the rows' host-speed probes (microseconds a round of the same Python
    loop on the timing core): a machine whose host reads slower judges every row slower."""
    probes = []
    for row in rows:
        try:
            probes.append(float(row["host_probe_us"]))  # text in the verdict's environment
        except (KeyError, TypeError, ValueError):  # no timing, hence no probe
            continue
    return round(statistics.median(probes), 1) if probes else None


def _quiet(rows: list[dict[str, Any]]) -> dict[str, float] | None:
    """What still ran while the rows' calls were timed with the others stood still
    (evaluate/sandbox/quiet_load.py), over every row: busy cores on average."""
    seconds = sum(_phase(row, ("quiet",)) for row in rows)
    if seconds <= 0:
        return None
    return {"seconds": round(seconds, 2),
            "busy_cores_elsewhere": round(_phase_sum(rows, "quiet_busy_elsewhere") / seconds, 2),
            "judge_cores": round(_phase_sum(rows, "quiet_judge_cpu") / seconds, 2),
            "steal_s": round(_phase_sum(rows, "quiet_steal"), 2)}


def _phase_sum(rows: list[dict[str, Any]], key: str) -> float:
    return sum(_phase(row, (key,)) for row in rows)


def _phase(row: dict[str, Any], keys: tuple[str, ...]) -> float:
    found = row.get("phases_s") or {}
    return sum(float(found.get(key) or 0.0) for key in keys)


def time_lines(spent: dict[str, Any]) -> list[str]:
    """The account in a few lines, as `--verbose` prints it."""
    lines = [f"where the time went: {spent['wall_s']:.0f} s on {spent['lanes']} lane(s), "
             f"{spent['rows']} rows judged ({spent['rows_wall_s']:.0f} s of lane time)"]
    first = spent.get("first_row")
    if first is not None and spent.get("first_row_s") is not None:
        grouped: dict[str, float] = {}
        for key, seconds in first["phases_s"].items():
            if key != "total" and "path_" not in key and not key.startswith("quiet"):
                grouped[_short(key)] = grouped.get(_short(key), 0.0) + seconds
        top = sorted(grouped.items(), key=lambda item: -item[1])[:4]
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in top if seconds >= 0.05)
        steps = ", ".join(f"{name} {first['phases_s'][key]:.1f} s"
                         for name, key in PATH_GROUPS.items()
                         if first["phases_s"].get(key, 0.0) >= 0.05)
        lines.append(f"  first row after {spent['first_row_s']:.1f} s: {first['task']} "
                     f"sample {first['sample']}" + (f" ({parts})" if parts else "")
                     + (f"; its path: {steps}" if steps else ""))
        start = start_line(first["phases_s"])
        if start:
            lines.append(f"  its worker's start: {start}")
    if spent.get("steps_s"):
        lines.append("  the suite's own steps, done at: " + ", ".join(
            f"{step} {seconds:.1f} s" for step, seconds in spent["steps_s"].items()))
    shown = [(name, seconds) for name, seconds in spent["phases_s"].items() if seconds > 0]
    if shown:
        lines.append("  verdicts' phases, summed over the rows (they overlap): "
                     + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in shown))
    path = spent.get("path_s") or {}
    if spent["rows"] and any(path.values()):
        lines.append("  a row's path on its lane, mean seconds (these add up to its wall time): "
                     + ", ".join(f"{name} {seconds / spent['rows']:.2f}"
                                 for name, seconds in path.items()))
    lines.append("  lanes' own waits: " + ", ".join(
        f"{name} {seconds:.1f} s" for name, seconds in spent["lane_waits_s"].items()))
    if spent.get("host_probe_us") is not None:
        lines.append(f"  the host's speed: its probe loop read {spent['host_probe_us']:.0f} us "
                     "a round (median over the rows; the same loop, higher on a slower host: "
                     "111 and 251 us on two H100 machines)")
    quiet = spent.get("quiet")
    if quiet:
        lines.append(f"  while calls were timed with the other jobs stood still "
                     f"({quiet['seconds']:.1f} s): {quiet['busy_cores_elsewhere']:.2f} cores "
                     f"busy on average off the timing cores, {quiet['judge_cores']:.2f} of "
                     f"them the judge's own process; {quiet['steal_s']:.2f} s taken from the "
                     "timing cores by the hypervisor")
    return lines


def start_line(phases: dict[str, float]) -> str:
    """A worker's start in its steps ('' where its verdict does not say them)."""
    total = phases.get("worker_start")
    if not total or "warmup_process_start" not in phases:
        return ""
    steps = [(name, _phase({"phases_s": phases}, keys)) for name, keys in START_STEPS.items()]
    summed = sum(seconds for _, seconds in steps)
    # a standby's phase counts from when it was given candidates, its steps from its start
    ahead = " (warmed up ahead: its steps from its process's start)" if summed > total else ""
    steps.append(("the rest", max(0.0, total - summed)))
    return f"{total:.1f} s{ahead}: " + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in steps
                                          if seconds >= 0.005)


def _short(phase: str) -> str:
    for name, keys in PHASE_GROUPS.items():
        if phase in keys:
            return name
    return phase.replace("_", " ")
