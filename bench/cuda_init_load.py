"""How long a CUDA context takes to make when other processes make theirs, or hold theirs,
or keep the cores busy: where a suite's 5 s contexts (0.4 s alone) come from.

    python3 bench/cuda_init_load.py [--out DIR] [--counts 1,2,4,8,12] [--held 0,8,16]
                                    [--running 0,2,6] [--churn 2,6]
    python3 bench/cuda_init_load.py --sample-every 10 --for 560 --out DIR   # beside a suite

Every process imports torch first, then waits at a barrier (a file), so only
the context is timed: `torch.cuda.init()`, one tensor on the device, a
synchronise. Three settings:

- at once: N processes make their contexts at the same moment, the cores idle;
- busy cores: the same, with a busy loop on every core;
- held: one process makes its context while M others hold theirs, idle;
- running: the same beside M processes that keep the GPU busy with kernels
  (back-to-back 2048^2 matmuls), as a suite's timing and checks do;
- churn: the same beside M processes that allocate and free 256 MiB of
  device memory in a loop (`cudaMalloc` and `cudaFree` through the caching
  allocator's `empty_cache`), as a suite's references and copies do.

If the at-once times grow with N while the cores idle, the driver makes
contexts one at a time (fewer contexts per verdict is the remedy); if they
grow only with busy cores, it is the CPU (fewer processes at once); if they
grow with contexts held, it is their number; with kernels running, the GPU's
time-slicing between contexts; with memory churning, the driver's own locks
(fewer allocations and frees while others start).

`--sample-every S` runs none of these: it starts one bare process every S
seconds (its torch import done first, as above) and writes each context's
time with the moment it began to `samples.jsonl`, until `--for` seconds
have passed or it is killed. Run beside `kernelevo suite`, it tells whether
any process's context is slow under the suite's load (the driver or the
GPU) or only the judge's workers' (their own process: cores, sandbox).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r'''
import os, sys, time, json
import torch
go, ready = sys.argv[1], sys.argv[2]
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.001)
started = time.perf_counter()
torch.cuda.init()
torch.empty(1, device="cuda")
torch.cuda.synchronize()
print(json.dumps({"context_s": time.perf_counter() - started}), flush=True)
hold = float(sys.argv[3])
time.sleep(hold)
'''

BUSY = "while True: pass"

# A process that makes its context, says so (the file `ready`), then keeps the
# GPU busy in one way until killed: "kernels" or "churn".
BACKGROUND = r'''
import sys, time
import torch
ready, mode = sys.argv[1], sys.argv[2]
torch.empty(1, device="cuda")
torch.cuda.synchronize()
a = torch.randn(2048, 2048, device="cuda")
open(ready, "w").close()
while True:
    if mode == "kernels":
        for _ in range(20):
            a = torch.tanh(a @ a)
        torch.cuda.synchronize()
    else:
        block = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        del block
        torch.cuda.empty_cache()
'''


def _run_at_once(count: int, folder: Path, hold_s: float = 0.0) -> list[subprocess.Popen]:
    """`count` children past their imports, waiting at the barrier, and the barrier's name."""
    go = folder / f"go-{time.monotonic_ns()}"
    children, readies = [], []
    for index in range(count):
        ready = folder / f"ready-{go.name}-{index}"
        readies.append(ready)
        children.append(subprocess.Popen([sys.executable, "-c", CHILD, str(go), str(ready),
                                          str(hold_s)], stdout=subprocess.PIPE, text=True))
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in readies) and time.monotonic() < deadline:
        if any(child.poll() is not None for child in children):
            raise SystemExit("a child ended before its torch import was done: is there a GPU?")
        time.sleep(0.01)
    time.sleep(0.5)  # every import done, its threads settled
    go.touch()
    return children


def _times(children: list[subprocess.Popen]) -> list[float]:
    out = []
    for child in children:
        line = child.stdout.readline() if child.stdout else ""
        if line.strip():
            out.append(json.loads(line)["context_s"])
    if not out:
        raise SystemExit("no child made a CUDA context (their errors are above)")
    return out


def at_once(count: int, folder: Path, busy: bool) -> dict:
    burners = [subprocess.Popen([sys.executable, "-c", BUSY])
               for _ in range(os.cpu_count() or 1)] if busy else []
    try:
        children = _run_at_once(count, folder)
        times = _times(children)
        for child in children:
            child.wait(60)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    return {"setting": "busy cores" if busy else "at once", "processes": count,
            "median_s": round(statistics.median(times), 3), "max_s": round(max(times), 3),
            "times_s": [round(t, 3) for t in times]}


def held(count: int, folder: Path) -> dict:
    holders = _run_at_once(count, folder, hold_s=60.0) if count else []
    try:
        if holders:
            _times(holders)  # their contexts made (none held: nothing to wait for)
        one = _run_at_once(1, folder)
        times = _times(one)
        one[0].wait(60)
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
    return {"setting": "held", "processes": 1, "held": count,
            "median_s": round(times[0], 3), "max_s": round(times[0], 3), "times_s": times}


def beside(mode: str, count: int, folder: Path) -> dict:
    """One context made while `count` processes keep the GPU busy in `mode`; their own
    loop's pace (iterations are not counted: the measured context is the figure)."""
    background, readies = [], []
    for index in range(count):
        ready = folder / f"bg-{mode}-{time.monotonic_ns()}-{index}"
        readies.append(ready)
        background.append(subprocess.Popen([sys.executable, "-c", BACKGROUND, str(ready), mode]))
    try:
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in readies) and time.monotonic() < deadline:
            if any(p.poll() is not None for p in background):
                raise SystemExit(f"a background process ({mode}) ended before it was ready")
            time.sleep(0.01)
        time.sleep(1.0)  # every loop under way
        times = []
        for _ in range(3):
            one = _run_at_once(1, folder)
            times += _times(one)
            one[0].wait(60)
    finally:
        for process in background:
            process.kill()
            process.wait()
    return {"setting": mode, "processes": 1, "held": count,
            "median_s": round(statistics.median(times), 3), "max_s": round(max(times), 3),
            "times_s": [round(t, 3) for t in times]}


def sample(every_s: float, for_s: float, folder: Path, out: Path) -> None:
    """One bare context every `every_s` seconds for `for_s` seconds, each appended to `out`."""
    started = time.monotonic()
    while time.monotonic() - started < for_s:
        began = time.monotonic()
        one = _run_at_once(1, folder)
        at = round(time.monotonic() - started, 1)
        try:
            row = {"at_s": at, "context_s": round(_times(one)[0], 3)}
        except SystemExit as exc:  # one failed start is a sample too, not the end
            row = {"at_s": at, "error": str(exc)}
        one[0].wait(60)
        with out.open("a") as sink:
            sink.write(json.dumps(row) + "\n")
        time.sleep(max(0.0, every_s - (time.monotonic() - began)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/cuda_init_load"))
    parser.add_argument("--counts", default="1,2,4,8,12")
    parser.add_argument("--held", default="0,8,16")
    parser.add_argument("--running", default="0,2,6", help="processes running kernels beside")
    parser.add_argument("--churn", default="2,6", help="processes allocating and freeing beside")
    parser.add_argument("--sample-every", type=float, default=0.0,
                        help="seconds between bare contexts timed beside other work (no settings)")
    parser.add_argument("--for", dest="for_s", type=float, default=600.0,
                        help="how long --sample-every goes on")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.sample_every > 0:
        with tempfile.TemporaryDirectory() as scratch:
            sample(args.sample_every, args.for_s, Path(scratch), args.out / "samples.jsonl")
        return
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for busy in (False, True):
            for count in map(int, args.counts.split(",")):
                rows.append(at_once(count, folder, busy))
                print(json.dumps(rows[-1]), flush=True)
        for count in map(int, args.held.split(",")):
            rows.append(held(count, folder))
            print(json.dumps(rows[-1]), flush=True)
        for mode, counts in (("kernels", args.running), ("churn", args.churn)):
            for count in (int(c) for c in counts.split(",") if c):
                rows.append(beside(mode, count, folder))
                print(json.dumps(rows[-1]), flush=True)
    (args.out / "cuda_init_load.json").write_text(json.dumps(rows, indent=1))
    print("\n| setting | processes | contexts beside | median s | max s |\n|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['setting']} | {row['processes']} | {row.get('held', '')} | "
              f"{row['median_s']} | {row['max_s']} |")


if __name__ == "__main__":
    main()
