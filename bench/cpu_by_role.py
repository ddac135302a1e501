"""Where a machine's CPU goes while a benchmark runs: CPU seconds by kind of process.

    python3 bench/cpu_by_role.py --out FILE.json [--interval 2] [--seconds N]

Every --interval seconds it reads each process's user and system time from
/proc and adds what each process used since the last look to its kind:
compilers (nvcc's chain, GCC, the linker, ninja), ptxas, Python processes
born from a forkserver, other Python processes (the judge, the harness) and
the rest; a process of one of the judge's sandboxed jobs is counted under
that job's kind too (run_worker/, run_oracle/, run_prebuild/: the kind that
leads its KERNELEVO_SANDBOX_ID). A process that
ends between two looks loses at most one interval. Writes the totals (and the
totals per interval) to --out when stopped (SIGTERM, SIGINT) or after
--seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time

_TICKS = os.sysconf("SC_CLK_TCK")
_MARKER = b"KERNELEVO_SANDBOX_ID="
_COMPILERS = {"nvcc", "cicc", "cudafe++", "fatbinary", "nvlink", "cc1plus", "cc1", "g++", "gcc",
              "c++", "ld", "collect2", "as", "ninja"}


def _job(pid: str) -> str:
    """The sandboxed job a process belongs to, by the kind leading its marker ('' if none)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return ""
    at = environ.find(_MARKER)
    if at < 0:
        return ""
    value = environ[at + len(_MARKER):].split(b"\0", 1)[0].decode(errors="replace")
    return value.rsplit("-", 1)[0] if "-" in value else "job"


def _kind(pid: str) -> tuple[str, float] | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            args = handle.read().split(b"\0")
    except OSError:
        return None
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    job = name[3:] if name.startswith("ke-") else _job(pid)  # a job's own process names itself
    found = _what(stat, args)
    if found is None:
        return None
    what, seconds = found
    return (f"{job}/{what}" if job else what), seconds


def _what(stat: str, args: list[bytes]) -> tuple[str, float] | None:
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    seconds = (int(fields[11]) + int(fields[12])) / _TICKS
    text = b" ".join(args).decode(errors="replace")
    if name == "ptxas":
        return "ptxas", seconds
    if name in _COMPILERS or os.path.basename(args[0].decode(errors="replace")) in _COMPILERS:
        return "compilers", seconds
    if "python" in name or "python" in text[:80]:
        if "forkserver" in text:
            return "python_forkserver_children", seconds
        return "python_other", seconds
    return "other", seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=3600.0)
    args = parser.parse_args()
    seen: dict[str, float] = {}
    totals: dict[str, float] = {}
    series: list[dict] = []
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    started = time.monotonic()
    me = str(os.getpid())
    while not stop and time.monotonic() - started < args.seconds:
        step: dict[str, float] = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid == me:
                continue
            found = _kind(pid)
            if found is None:
                continue
            kind, seconds = found
            used = seconds - seen.get(pid, seconds if not series else 0.0)
            seen[pid] = seconds
            if used > 0:
                step[kind] = step.get(kind, 0.0) + used
                totals[kind] = totals.get(kind, 0.0) + used
        series.append({"t": round(time.monotonic() - started, 1),
                       **{k: round(v, 2) for k, v in step.items()}})
        time.sleep(args.interval)
    with open(args.out, "w") as handle:
        json.dump({"interval_s": args.interval, "seconds": round(time.monotonic() - started, 1),
                   "cpu_s": {k: round(v, 1) for k, v in sorted(totals.items())},
                   "series": series}, handle, indent=0)


if __name__ == "__main__":
    main()
