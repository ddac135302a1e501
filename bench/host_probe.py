"""How steady the host's CPU speed is: a fixed Python loop timed on one core, then another.

    python bench/host_probe.py [--seconds 8] [--cores 15,3] > $OUT/host_probe.txt

The same loop (evaluate/child/host_speed.py's kind: 20,000 additions) runs
back to back for `--seconds` on each core named, pinned there; its times'
percentiles say how far the host's speed moves with nothing else changing,
and the kernel's CPU ticks over the stretch (steal time included) are shown.
"""

from __future__ import annotations

import argparse
import os
import time


def _ticks() -> list[int]:
    with open("/proc/stat") as stat:
        return [int(x) for x in stat.readline().split()[1:]]


def _loop() -> int:
    total = 0
    for step in range(20000):
        total += step
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--cores", default="",
                        help="comma-separated; default: the last allowed core and the fourth")
    args = parser.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    cores = ([int(c) for c in args.cores.split(",")] if args.cores
             else sorted({allowed[-1], allowed[min(3, len(allowed) - 1)]}, reverse=True))
    for core in cores:
        os.sched_setaffinity(0, {core})
        before, times = _ticks(), []
        end = time.time() + args.seconds
        while time.time() < end:
            started = time.perf_counter()
            _loop()
            times.append((time.perf_counter() - started) * 1e6)
        ticks = [b - a for a, b in zip(before, _ticks())]
        times.sort()
        n = len(times)
        print(f"core {core}: n={n} p5={times[n // 20]:.0f}us p50={times[n // 2]:.0f} "
              f"p95={times[19 * n // 20]:.0f} max={times[-1]:.0f}; cpu ticks "
              f"user,nice,sys,idle,iowait,irq,softirq,steal={ticks[:8]}")
    os.sched_setaffinity(0, set(allowed))


if __name__ == "__main__":
    main()
