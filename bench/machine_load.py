"""How busy the machine's CPUs and GPUs were while a bench ran: sampled in a thread.

    with MachineLoad() as load:
        ...                       # the work measured
    load.summary()                # CPU busy share, GPU utilisation, GPU memory
    load.samples                  # one row a period: seconds, CPU busy, GPU util, memory

The CPU's busy share over each period comes from /proc/stat (every core
together: user, nice, system, irq, softirq and steal over all ticks); the
GPUs' utilisation and memory used from `nvidia-smi` where it is on PATH (the
mean over the GPUs, and the memory of the fullest one). Whether a suite's
lanes wait on the CPUs or on the GPU says whether more lanes could help.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
import time
from types import TracebackType
from typing import Any

_SMI_QUERY = ["--query-gpu=utilization.gpu,memory.used,memory.total",
              "--format=csv,noheader,nounits"]


def cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) ticks of every core together since boot, or None without /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    total = sum(fields[:8])  # guest time is counted in user already
    return total - idle, total


def gpu_reading(smi: str | None) -> tuple[float, float, float] | None:
    """(mean utilisation %, fullest GPU's memory used MiB, its total MiB), or None."""
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, *_SMI_QUERY], capture_output=True, text=True, timeout=10,
                              check=False)
        rows = [[float(x) for x in line.split(",")] for line in done.stdout.splitlines()
                if line.strip()]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    if not rows or any(len(row) != 3 for row in rows):
        return None
    fullest = max(rows, key=lambda row: row[1])
    return statistics.mean(row[0] for row in rows), fullest[1], fullest[2]


class MachineLoad:
    """Samples the machine's load every `period_s` from `start()` (or `with`) to `stop()`."""

    def __init__(self, period_s: float = 1.0, smi: str | None = "nvidia-smi") -> None:
        self.period_s = period_s
        self._smi = shutil.which(smi) if smi else None
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="machine-load", daemon=True)
        self._started = 0.0

    def __enter__(self) -> MachineLoad:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        self._started = time.perf_counter()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        before = cpu_ticks()
        while not self._stop.wait(self.period_s):
            now = cpu_ticks()
            busy = None
            if before is not None and now is not None and now[1] > before[1]:
                busy = (now[0] - before[0]) / (now[1] - before[1])
            before = now
            gpu = gpu_reading(self._smi)
            self.samples.append({
                "t_s": round(time.perf_counter() - self._started, 1),
                "cpu_busy": None if busy is None else round(busy, 3),
                "gpu_util_pct": None if gpu is None else gpu[0],
                "gpu_memory_mib": None if gpu is None else gpu[1],
                "gpu_memory_total_mib": None if gpu is None else gpu[2]})

    def summary(self) -> dict[str, Any]:
        """Means and extremes over the samples; None where nothing was read."""
        cpu = [s["cpu_busy"] for s in self.samples if s["cpu_busy"] is not None]
        util = [s["gpu_util_pct"] for s in self.samples if s["gpu_util_pct"] is not None]
        memory = [s["gpu_memory_mib"] for s in self.samples if s["gpu_memory_mib"] is not None]
        total = next((s["gpu_memory_total_mib"] for s in self.samples
                      if s["gpu_memory_total_mib"] is not None), None)
        return {
            "samples": len(self.samples),
            "cpu_busy_mean": round(statistics.mean(cpu), 3) if cpu else None,
            "cpu_busy_share_over_90pct": (round(sum(c > 0.9 for c in cpu) / len(cpu), 3)
                                          if cpu else None),
            "gpu_util_mean_pct": round(statistics.mean(util), 1) if util else None,
            "gpu_memory_max_mib": max(memory) if memory else None,
            "gpu_memory_total_mib": total,
        }


def load_line(summary: dict[str, Any]) -> str:
    """One line for a bench's printout."""
    def shown(value: Any, form: str) -> str:
        return "-" if value is None else format(value, form)

    return (f"machine load over {summary['samples']} samples: CPU busy "
            f"{shown(summary['cpu_busy_mean'], '.0%')} on average, over 90 % in "
            f"{shown(summary['cpu_busy_share_over_90pct'], '.0%')} of them; GPU utilisation "
            f"{shown(summary['gpu_util_mean_pct'], '.0f')} %; GPU memory at most "
            f"{shown(summary['gpu_memory_max_mib'], '.0f')} of "
            f"{shown(summary['gpu_memory_total_mib'], '.0f')} MiB")
