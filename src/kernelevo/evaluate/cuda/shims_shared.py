"""What the compiler stand-ins of one load_inline build share (shims.py).

The header both know (torch/extension.h), the build folder's failure mark
and the compile that heeds it, and the step times a benchmark asks for.
Standard library only: the stand-ins run as a script (`python -S -E`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

HEADER = "torch/extension.h"
SIBLING_FAILED = ".kernelevo-compile-failed"  # in the build folder, where ninja runs both
# What a compile stopped for its sibling's failure says (with "error", so
# that nvcc's stand-in never takes it for the lighter header's fault).
STOPPED = "error: stopped: another compile of this extension failed (its error is above or below)"


def compile_in_build(command: list[str]) -> int:
    """Run one compile of a load_inline build; its exit code.

    ninja waits for every running compile once one has failed, so a broken
    CUDA file would cost the host file's whole compile too (about 15 s of
    torch's headers). A failure marks the build folder (SIBLING_FAILED); a
    compile still running when the mark appears is stopped, and the build
    reports the first failure after that one compile.
    """
    process = None
    while not Path(SIBLING_FAILED).exists():
        if process is None:
            process = subprocess.Popen(command, preexec_fn=os.setpgrp)  # cc1plus goes with it
        try:
            code = process.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            pass
    else:  # failed before this compile started, or while it ran
        if process is not None:
            kill_group(process)
            process.wait()
        sys.stderr.write(STOPPED + "\n")
        record({"role": "cxx", "stopped": True})
        return 1
    if code != 0:
        Path(SIBLING_FAILED).touch()
    return code


def kill_group(process: subprocess.Popen) -> None:
    """Kill a process started in a group of its own, with everything it started."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def record(entry: dict) -> None:
    """Append one line of build timing to $KERNELEVO_BUILD_TIMES, if set (a benchmark's switch)."""
    target = os.environ.get("KERNELEVO_BUILD_TIMES")
    if target:
        with open(target, "a") as handle:
            handle.write(json.dumps(entry) + "\n")
