"""A child's moment, between steps of its checks, to let a waiting timing have the GPU.

Timing runs alone on the GPU (evaluate/parent/gate.py): a timing phase waits
until every shared holder lets go. An oracle or a worker used to hold its
share through all its checks, tens of seconds for a large task, and every
lane's timing waited behind it meanwhile (a suite's timings waited 4 s a
row, up to 66 s, on an H100: bench/RESULTS.md). At a checkpoint the child's
queued kernels are done, and its hold is given up and taken again: a timing
phase waiting goes first, and with none waiting it costs one message.
"""

from __future__ import annotations

from typing import Any

from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.messages import Gpu


def gpu_checkpoint(channel: Any, device: str) -> None:
    """Let a waiting timing phase go first: this process's kernels done, the hold taken again."""
    task_inputs.synchronize(device)
    channel.ask(Gpu(brief=True))
