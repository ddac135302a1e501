"""A CUDA candidate on a machine without a GPU: its verdict from a compile-only check.

Nothing CUDA can run here, so no oracle or worker starts for it. In a
process of its own, the candidate is imported with `load_inline` standing in
as an nvcc compile check (build.py), under the build's limit
(`build_timeout_s`), not the candidate's wall-clock limit (`timeout_s`): an
nvcc check of a torch extension takes minutes of CPU on a busy small
machine. The verdict says what was checked, how long it took, and the limit.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from kernelevo.config import EvalConfig
from kernelevo.evaluate.child.worker import run_compile_check
from kernelevo.evaluate.sandbox.jobs import run_job
from kernelevo.evaluate.shared.messages import CompileChecked, PrebuildJob
from kernelevo.evaluate.verdict import Verdict, verdict_for


def compile_check(source: str, config: EvalConfig) -> Verdict | None:
    """The verdict of a CUDA candidate that cannot run here; None where its import built nothing.

    None also when the check's process died before it reported: the worker
    then meets the candidate as any other, and says how it ended.
    """
    scratch = Path(tempfile.mkdtemp(prefix="kernelevo-check-"))
    limit_s = config.build_timeout_s
    try:
        result = run_job(run_compile_check, PrebuildJob(source, str(scratch)).to_json(), scratch,
                         limit_s, config.output_limit_bytes,
                         environment={"CUDA_VISIBLE_DEVICES": ""},
                         isolate_network=config.isolate_network)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    details: dict[str, Any] = {
        "phases_s": {"compile_check": round(result.wall_s, 3)}, "logs": result.log_tail,
        "isolation": f"compile-only check in its own process, no GPU, network "
                     f"{result.network}, {result.confinement}",
        "environment": {"device": "cpu", "precision": config.precision,
                        "policy": config.policy, "torch": torch.__version__}}
    if result.timed_out:
        return verdict_for("no_gpu", f"no GPU, and the nvcc compile check did not finish within "
                           f"its own limit of {limit_s:g} s (build_timeout_s): the CUDA source "
                           "was not checked", **details)
    if result.final is None:
        return None
    checked = CompileChecked.from_json(result.final)
    if checked.reason is None:
        return None
    message = checked.message
    if checked.reason == "no_gpu":
        message += (f" (a compile-only check: {checked.wall_s:.0f} s of its own limit of "
                    f"{limit_s:g} s, build_timeout_s)")
    return verdict_for(checked.reason, message, **details)
