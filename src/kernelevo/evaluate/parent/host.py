"""The Judge as its evaluations see it: what a session, its oracle, its worker's state
and the verdicts they build read of the judge that runs them.

A Protocol, so those modules name the type without importing judge.py, which
imports them (tests/test_import_graph.py counts TYPE_CHECKING imports too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

from kernelevo.config import EvalConfig
from kernelevo.evaluate.parent.baseline_store import BaselineStore
from kernelevo.task import Task


class JudgeHost(Protocol):
    """The settings, device and stores one Judge lends the evaluations it runs."""

    config: EvalConfig
    task: Task
    device: str  # "cuda" or "cpu"
    compare_device: str  # where outputs are compared: "cuda:N" or "cpu"
    gpu_index: int | None
    child_environment: dict[str, str]  # what the judge adds to its children's environment
    cache_dir: Path
    baseline_store: BaselineStore | None
    baseline_key: str
    progress: Callable[[str], None]
