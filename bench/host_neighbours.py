"""Why one process's host runs 2x slower than the next one's: a busy neighbour core, or the process.

    python bench/host_neighbours.py [--core 15] [--processes 12] --out DIR

The same 20,000-addition loop as the judge's host probe
(evaluate/child/host_speed.py), pinned to the timing core (default: the last
allowed core), in two experiments:

- **neighbours**: for every other allowed core, a spinning process pinned
  there, and the probe's median on the timing core beside it, each against
  the probe with nothing spinning just before. A core whose spinner slows the
  timing core by far more than the others shares its physical core (a
  hyperthread the virtual machine does not show as a sibling) or its cache.
- **processes**: `--processes` rounds, each of three probes of 0.3 s: a
  fresh Python process started on the timing core; a fresh process started
  on another core (each in turn), building a heap there as a worker does
  before it moves onto the timing core, then moved there; a fresh process
  with address-space randomisation off and a fixed hash seed (`fixed`); a
  child forked from the long-lived process (as the judge's forkserver makes
  its workers: the parent's layout, copied); and the same long-lived
  process. If fresh processes read bimodal while the long-lived one stays
  steady, the speed is the process's; if the fixed ones then read steady
  too, it is where the address layout fell (code and data aliasing in the
  caches and branch predictors), and forked children share their parent's;
  if only the moved ones read slow, it is where their memory was placed (the
  judge's worker starts off the timing core and is pinned onto it to time);
  if all move together, the machine's.

The NUMA nodes the kernel shows and `lscpu` go into the facts.

Writes DIR/host_neighbours.json and prints a table of each.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROBE_SECONDS = 0.3
SETTLE_S = 0.1

# The loop as a program of its own, for the fresh processes: prints its median in us.
_FRESH = f"""
import os, statistics, sys, time
os.sched_setaffinity(0, {{int(sys.argv[2])}})
heap = [str(i) for i in range(300000)]  # a heap made where the process started
os.sched_setaffinity(0, {{int(sys.argv[1])}})
def loop():
    total = 0
    for step in range(20000):
        total += step
    return total
times, end = [], time.perf_counter() + {PROBE_SECONDS}
while time.perf_counter() < end:
    started = time.perf_counter()
    loop()
    times.append((time.perf_counter() - started) * 1e6)
print(statistics.median(times))
"""

_ADDR_NO_RANDOMIZE = 0x0040000  # personality(2): this process's children get a fixed layout

_SPIN = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def _loop() -> int:
    total = 0
    for step in range(20000):
        total += step
    return total


def probe_us(seconds: float = PROBE_SECONDS) -> float:
    """The loop's median time in us, timed back to back for `seconds` in this process."""
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        started = time.perf_counter()
        _loop()
        times.append((time.perf_counter() - started) * 1e6)
    return statistics.median(times)


def neighbours(core: int, others: list[int]) -> list[dict]:
    """Per other core: the probe alone, then beside a spinner there, and their ratio."""
    rows = []
    for other in others:
        alone = probe_us()
        spinner = subprocess.Popen([sys.executable, "-c", _SPIN, str(other)])
        try:
            time.sleep(SETTLE_S)
            beside = probe_us()
        finally:
            spinner.kill()
            spinner.wait()
        rows.append({"core": other, "alone_us": round(alone, 1), "beside_us": round(beside, 1),
                     "ratio": round(beside / alone, 3)})
        print(f"spinner on {other:>3}: alone {alone:7.1f} us, beside {beside:7.1f} us, "
              f"{beside / alone:5.2f}x", flush=True)
    return rows


def _fixed_layout() -> None:
    """In the child before it runs Python: no address-space randomisation from here on."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.personality(ctypes.c_ulong(_ADDR_NO_RANDOMIZE)) == -1:
        os._exit(3)


def _fresh(core: int, started_on: int, fixed: bool = False) -> float:
    environment = {**os.environ, "PYTHONHASHSEED": "0"} if fixed else None
    done = subprocess.run([sys.executable, "-c", _FRESH, str(core), str(started_on)],
                          capture_output=True, text=True, check=False, env=environment,
                          preexec_fn=_fixed_layout if fixed else None)
    try:
        return float(done.stdout.strip())
    except ValueError:
        return float("nan")


def _forked(core: int) -> float:
    """The probe in a child forked from this process, as a forkserver's worker runs."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: pinned where the parent is, its layout the parent's
        os.close(read)
        try:
            os.sched_setaffinity(0, {core})
            os.write(write, str(probe_us()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = pipe.read()
    os.waitpid(pid, 0)
    try:
        return float(said)
    except ValueError:
        return float("nan")


def processes(core: int, others: list[int], count: int) -> list[dict]:
    """Fresh processes on the timing core, fresh ones moved there, fresh ones with a fixed
    address layout, children forked from this long-lived process, and this process."""
    rows = []
    for index in range(count):
        started_on = others[index % len(others)] if others else core
        fresh, moved = _fresh(core, core), _fresh(core, started_on)
        fixed, forked, kept = _fresh(core, core, fixed=True), _forked(core), probe_us()
        rows.append({"run": index, "fresh_us": round(fresh, 1), "moved_from": started_on,
                     "moved_us": round(moved, 1), "fixed_us": round(fixed, 1),
                     "forked_us": round(forked, 1), "kept_us": round(kept, 1)})
        print(f"run {index:>2}: fresh {fresh:7.1f} us, moved from core {started_on:>3} "
              f"{moved:7.1f} us, fixed layout {fixed:7.1f} us, forked {forked:7.1f} us, "
              f"long-lived {kept:7.1f} us", flush=True)
    return rows


def machine_facts() -> dict:
    """NUMA nodes and their cores as the kernel shows them, and lscpu's text."""
    nodes = {}
    for node in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        try:
            nodes[node.name] = (node / "cpulist").read_text().strip()
        except OSError:
            continue
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        lscpu = ""
    return {"numa_nodes": nodes, "lscpu": lscpu}


def spread(values: list[float]) -> str:
    values = [v for v in values if v == v]
    return (f"median {statistics.median(values):.0f} us, min {min(values):.0f}, "
            f"max {max(values):.0f} ({max(values) / min(values):.2f}x)") if values else "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", type=int, default=None,
                        help="the core to probe (default: the last allowed one)")
    parser.add_argument("--processes", type=int, default=12)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    core = allowed[-1] if args.core is None else args.core
    if core not in allowed:
        parser.error(f"core {core} is not allowed here ({allowed})")
    os.sched_setaffinity(0, {core})
    facts = {"core": core, "allowed": allowed, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
             "load": os.getloadavg(), **machine_facts()}
    print(f"probing core {core} of {allowed}; load average {facts['load']}; "
          f"NUMA nodes {facts['numa_nodes']}", flush=True)
    others = [c for c in allowed if c != core]
    near = neighbours(core, others)
    runs = processes(core, others, args.processes)
    ratios = sorted(near, key=lambda row: row["ratio"], reverse=True)
    summary = {
        "slowest_neighbours": [f"{r['core']}: {r['ratio']:.2f}x" for r in ratios[:3]],
        "other_neighbours_median_ratio": (round(statistics.median(r["ratio"] for r in ratios[1:]), 3)
                                          if len(ratios) > 1 else None),
        "fresh_processes": spread([r["fresh_us"] for r in runs]),
        "fresh_processes_moved_onto_the_core": spread([r["moved_us"] for r in runs]),
        "fresh_processes_with_a_fixed_layout": spread([r["fixed_us"] for r in runs]),
        "children_forked_from_the_long_lived_one": spread([r["forked_us"] for r in runs]),
        "long_lived_process": spread([r["kept_us"] for r in runs]),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "host_neighbours.json").write_text(json.dumps(
        {"facts": facts, "neighbours": near, "processes": runs, "summary": summary}, indent=1))
    print("\n".join(f"- {key.replace('_', ' ')}: {value}" for key, value in summary.items()))


if __name__ == "__main__":
    main()
