"""Nsight Compute for a candidate's top kernels: a small fixed metric set, outside any timing.

ncu replays each kernel many times under its own clock control, so it runs
in its own process (this module's `main`, driving a candidate that already
passed the judge), never in a judged or timed one. Where it cannot run, the
reason is the result: no `ncu` on PATH, or performance counters not
permitted (ERR_NVGPUCTRPERM, as in most containers); the torch profiler and
the analytic roofline still stand.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import kernelevo.version
from kernelevo.evaluate.analysis.profile import NcuKernel
from kernelevo.evaluate.sandbox.environment import candidate_environment

# short name -> ncu metric; percents are of the peak the metric names.
METRICS = {
    "dram_throughput_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers_per_thread": "launch__registers_per_thread",
    "shared_static_bytes": "launch__shared_mem_per_block_static",
    "shared_dynamic_bytes": "launch__shared_mem_per_block_dynamic",
    "duration_ns": "gpu__time_duration.sum",
}
# Warp-stall reasons, as cycles a warp waits per issued instruction.
STALL_REASONS = ("long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle",
                 "math_pipe_throttle", "barrier", "wait", "not_selected", "membar",
                 "tex_throttle", "no_instruction", "dispatch_stall")
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
TOP_STALLS = 3
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
NCU_TIMEOUT_S = 300.0


class NcuUnavailable(Exception):
    """ncu could not measure: the message says why, in the user's terms."""


@dataclass(frozen=True)
class NcuRun:
    """Metrics per kernel, or the reason there are none."""

    kernels: tuple[NcuKernel, ...]
    problem: str = ""


def all_metrics() -> list[str]:
    return list(METRICS.values()) + [STALL_METRIC.format(reason) for reason in STALL_REASONS]


def command(ncu: str, kernel_names: Iterable[str], target: list[str], log_file: Path,
            launches_per_kernel: int = 1) -> list[str]:
    """The ncu command line measuring the named kernels of `target`."""
    names = [re.escape(name) for name in kernel_names]
    filters = ["--kernel-name", f"regex:{'|'.join(names)}"] if names else []
    count = max(1, launches_per_kernel * max(1, len(names)))
    return [ncu, "--csv", "--page", "raw", "--metrics", ",".join(all_metrics()),
            *filters, "--launch-count", str(count), "--target-processes", "all",
            "--log-file", str(log_file), *target]


def target_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The watched process's environment: a candidate's (no secrets), and this package importable.

    ncu starts it in a temporary folder, so a relative PYTHONPATH (`src`, as
    a checkout runs) would no longer find kernelevo: its folder goes first.
    """
    environment = candidate_environment(environ)
    home = str(Path(kernelevo.version.__file__).resolve().parents[1])  # the folder above kernelevo/
    paths = [home] + [os.path.abspath(path) for path in
                      environment.get("PYTHONPATH", "").split(os.pathsep) if path]
    environment["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return environment


def problem_in(text: str) -> str:
    """Why ncu's output holds no metrics, if it says so; '' when it does not.

    When the watched program failed, its own last error line comes with
    ncu's ("The application returned an error code (1)" alone says nothing).
    """
    if PERMISSION_ERROR in text:
        return (f"Nsight Compute: GPU performance counters not permitted ({PERMISSION_ERROR}); "
                "run with admin rights or set NVreg_RestrictProfilingToAdminUsers=0 on the host")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("==ERROR==")]
    if not errors:
        return ""
    own = [line for line in lines if not line.startswith("==")
           and not line.startswith('"') and ("Error" in line or "error" in line)]
    cause = f" (the program: {own[-1][:200]})" if own else ""
    return f"Nsight Compute failed: {errors[0][:300]}{cause}"


def parse_raw_csv(text: str) -> list[NcuKernel]:
    """Kernels from `ncu --csv --page raw` output: a header row, a units row, a row per launch."""
    rows = list(csv.reader(io.StringIO("\n".join(
        line for line in text.splitlines() if line.startswith('"')))))
    if len(rows) < 2:
        return []
    header, body = rows[0], rows[1:]
    if body and body[0] and body[0][0] == "":  # the units row ("", "", ..., "%", "byte")
        body = body[1:]
    column = {name: index for index, name in enumerate(header)}
    return [_kernel(row, column) for row in body if len(row) == len(header)]


def _kernel(row: list[str], column: dict[str, int]) -> NcuKernel:
    def value(metric: str) -> float | None:
        index = column.get(metric)
        if index is None:
            return None
        try:
            return float(row[index].replace(",", ""))
        except ValueError:
            return None  # n/a: not collected for this launch

    metrics = {short: found for short, metric in METRICS.items()
               if (found := value(metric)) is not None}
    stalls = sorted(((reason, found) for reason in STALL_REASONS
                     if (found := value(STALL_METRIC.format(reason))) is not None),
                    key=lambda item: -item[1])
    name = row[column["Kernel Name"]] if "Kernel Name" in column else "?"
    return NcuKernel(name, metrics, tuple(stalls[:TOP_STALLS]))


def measure(kernel_names: list[str], task_path: str, candidate_path: str, precision: str,
            ncu: str | None = None, timeout_s: float = NCU_TIMEOUT_S) -> NcuRun:
    """ncu's metrics for the named kernels of a candidate, or why there are none."""
    ncu = ncu or shutil.which("ncu")
    if not ncu:
        return NcuRun((), "Nsight Compute: ncu is not on PATH (install Nsight Compute, or "
                      "give its path); torch profiler and roofline only")
    # ncu starts the target in a folder of its own: paths relative to the
    # user's working directory would name nothing there.
    target = [sys.executable, "-m", "kernelevo.evaluate.child.ncu_target", os.path.abspath(task_path),
              os.path.abspath(candidate_path), precision]
    with tempfile.TemporaryDirectory(prefix="kernelevo-ncu-") as folder:
        log_file = Path(folder) / "ncu.csv"
        try:
            # ncu must start the candidate's process itself, so this run is outside the
            # judge's sandbox: only a candidate that passed it gets here, at the user's
            # command, never in a search; secrets stay out of its environment.
            done = subprocess.run(command(ncu, kernel_names, target, log_file),
                                  capture_output=True, text=True, timeout=timeout_s,
                                  cwd=folder, env=target_environment(os.environ))
        except subprocess.TimeoutExpired:
            return NcuRun((), f"Nsight Compute: ran past {timeout_s:.0f} s")
        logged = log_file.read_text() if log_file.is_file() else ""
    output = logged + "\n" + done.stdout + "\n" + done.stderr
    kernels = parse_raw_csv(logged or done.stdout)
    problem = "" if kernels else (problem_in(output)
                                  or f"Nsight Compute measured no kernel (exit {done.returncode})")
    return NcuRun(tuple(kernels), problem)
