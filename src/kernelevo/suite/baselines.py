"""Baseline times kept per GPU model, so a suite times eager and torch.compile once per task.

One JSON file per GPU model under the cache folder; a task's entry is keyed
by its source (sizes included), the precision and the measure, so any change
to what is timed misses the store and is measured afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kernelevo.evaluate.verdict import TimingStats, Verdict


# Times stored before the contestants ran under PyTorch's default backend
# settings (they ran under the reference's strict ones) are never reused.
_FORMAT = "user-backend-1"


def gpu_model() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def library_words() -> str:
    """The versions of what runs eager and torch.compile: torch, CUDA, cuDNN, Triton."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return (f"torch {torch.__version__} cuda {torch.version.cuda} "
            f"cudnn {torch.backends.cudnn.version()} triton {triton_version}")


class BaselineStore:
    """Stored baseline TimingStats by task and measure, for one GPU model."""

    def __init__(self, cache_dir: Path, gpu: str):
        slug = re.sub(r"[^A-Za-z0-9]+", "-", gpu).strip("-").lower() or "gpu"
        self.path = cache_dir / "baselines" / f"{slug}.json"
        self.gpu = gpu
        self._lock = threading.Lock()  # suites judge on several GPUs at once
        try:
            self._entries: dict[str, Any] = json.loads(self.path.read_text())["tasks"]
        except (OSError, ValueError, KeyError, TypeError):
            self._entries = {}

    @staticmethod
    def key(source: str, precision: str, measure: str, conv_tf32: bool = False) -> str:
        """What the times depend on: the task, its precision, the measure, the backend
        settings, and the libraries that run the baselines (a store outlives an upgrade)."""
        from kernelevo.evaluate.inputs import user_backend_words

        settings = (f"{_FORMAT}\0{precision}\0{measure}\0{user_backend_words(conv_tf32)}"
                    f"\0{library_words()}")
        return hashlib.sha256(f"{settings}\0{source}".encode()).hexdigest()[:24]

    def get(self, key: str, wanted: tuple[str, ...]) -> dict[str, TimingStats] | None:
        with self._lock:
            entry = self._entries.get(key)
        if not entry or not set(wanted) <= set(entry["stats"]):
            return None
        return {name: TimingStats(**entry["stats"][name]) for name in wanted}

    def put(self, key: str, measure: str, verdict: Verdict) -> None:
        stats = {name: asdict(s) for name, s in verdict.measures.get(measure, {}).items()
                 if name != "candidate"}
        if not stats:
            return
        with self._lock:
            self._entries[key] = {"stats": stats,
                                  "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            scratch = self.path.with_suffix(f".{os.getpid()}.tmp")
            scratch.write_text(json.dumps({"gpu": self.gpu, "tasks": self._entries}, indent=1))
            os.replace(scratch, self.path)
