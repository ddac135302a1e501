"""The reference oracle's peak memory, by phase, in units of one input: what a task of a given size needs.

    python bench/oracle_memory.py [--elements 67108864] [--backward] [--out DIR]

Runs the oracle's own steps (evaluate/child/oracle.py `_compute`) in this
process on the CPU, for a ReLU task of one fp32 input of `--elements`
elements (KernelBench level 1's resized tasks: 1.6 G), with the judge's
default four input sets (one a stress set), and samples this process's
resident memory every 2 ms. Each phase's peak above the start is printed in
units of one input's bytes: at 1.6 G elements one unit is 6.4 GB, so a peak of
k units asks k x 6.4 GB of the GPU where the oracle runs there. On the CPU
nothing is cached between frees (large blocks go back to the system), so
the peak is the most the oracle held at once; on a GPU the allocator's
rounding and the CUDA context come on top, and inputs are made on the host
first (not counted there). Inputs are made again each time they are needed,
as the judge does for sets above 2 GiB.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

from kernelevo.evaluate.child import oracle
from kernelevo.evaluate.shared import inputs
from kernelevo.evaluate.shared.messages import OracleJob, Sender

TASK = '''
import torch, torch.nn as nn
batch_size = 16
dim = {dim}
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.rand(batch_size, dim)]
def get_init_inputs():
    return []
'''


def _resident() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class _Phases:
    """The oracle's channel, answering every ask, and the resident peak within each phase."""

    def __init__(self) -> None:
        self.phase, self.peaks, self.done = "start", {"start": 0}, False

    def send(self, kind: str, **fields: object) -> None:
        if kind == "progress":
            self.phase = str(fields.get("phase", "?"))

    def ask(self, kind: str, **fields: object) -> dict:
        return {}

    def sample(self) -> None:
        while not self.done:
            now = _resident()
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), now)
            time.sleep(0.002)


def measure(elements: int, backward: bool) -> dict:
    job = OracleJob(task_source=TASK.format(dim=elements // 16), device="cpu", dtype="float32",
                    scratch=tempfile.mkdtemp(prefix="oracle-memory-"), seeds=(1, 2, 3, 4),
                    variants=(None, None, None, 8.0), backward=backward)
    # Sets above 2 GiB (KernelBench's 6.4 GB) are made again each time, not kept: the
    # smaller stand-in is measured as they are.
    inputs._KEEP_LIMIT_BYTES = min(inputs._KEEP_LIMIT_BYTES, elements * 4 - 1)
    phases = _Phases()
    start = _resident()
    sampler = threading.Thread(target=phases.sample, daemon=True)
    sampler.start()
    oracle._compute(job, Sender(phases))
    phases.done = True
    sampler.join()
    unit = elements * 4
    return {"elements": elements, "backward": backward,
            "peak_units": round((max(phases.peaks.values()) - start) / unit, 1),
            "by_phase_units": {k: round(max(v - start, 0) / unit, 1)
                               for k, v in phases.peaks.items() if k != "start"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1 << 26)
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    row = measure(args.elements, args.backward)
    print(f"{args.elements} elements, backward {args.backward}: peak {row['peak_units']} x one "
          f"input ({row['peak_units'] * args.elements * 4 / 1e9:.2f} GB)")
    for phase, units in row["by_phase_units"].items():
        print(f"  {phase:24s} {units:5.1f} x")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        name = f"oracle_memory_{args.elements}{'_backward' if args.backward else ''}.json"
        (args.out / name).write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
