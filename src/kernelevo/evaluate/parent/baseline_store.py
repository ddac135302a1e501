"""Baseline times kept per task: eager and torch.compile timed once, not beside every candidate.

EVALUATION.md ("Timing") lets baselines be timed in a trusted process and
reused from a store, re-checked against a drift probe. Here:

- The only source of an entry is a worker's warm-up, before any candidate
  is loaded in that process: the harness's and the task's code alone time
  the baselines, with the GPU to themselves (child/store_timing.py, `stored_or_timed`).
- Each candidate is then timed beside a brief probe of one baseline (its
  first, eager by default). When the probe's time on every measure it
  checks is within `DRIFT` of the stored one, the verdict uses the stored
  times; otherwise every baseline is timed again beside the candidate, as
  without a store, and the entry goes (the next worker times it afresh).
- Baselines quicker than `STORED_MIN_MS` a call are timed beside every
  candidate, never from the store; a worker whose warm-up finds them surely
  that quick (`store_timing.surely_short`) stores none.
- A judge keeps its store in memory; a suite keeps one per GPU model in the
  cache folder, so the next suite finds its tasks' baselines timed.

An entry's key holds what its times depend on: the task's source (its sizes
included), the precision, the timing settings, the backend settings and the
versions of the libraries that run the baselines.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelevo.cache_dir import cache_key, per_gpu_file, write_json_whole
from kernelevo.config import TimingConfig
from kernelevo.evaluate.analysis.baseline_drift import Measures

# Times stored before the store's entries came from a trusted worker only
# (they were read off a candidate's verdict) are never reused.
# Format 2: torch.compile timed per call inside a compiled model of several calls.
# Format 3: timed under the timing phase's backend settings (convolutions in TF32 by
# default); format 2's were timed under fp32 convolutions whatever its key said.
_FORMAT = "trusted-warmup-3"


@dataclass(frozen=True)
class StoredTimes:
    """The baselines' stats by measure, when and how they were timed."""

    measures: Measures
    measured_at: str
    notes: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        """The baselines stored, in the order they were timed (the first is the probe)."""
        return list(next(iter(self.measures.values()), {}))


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


def store_key(source: str, precision: str, timing: TimingConfig) -> str:
    """What stored times depend on: the task, its precision, the timing and backend
    settings, and the libraries that run the baselines (a store outlives an upgrade)."""
    from kernelevo.evaluate.shared.inputs import user_backend_words

    settings = {k: v for k, v in asdict(timing).items() if k != "autotune_budget_s"}
    words = (f"{_FORMAT}\0{precision}\0{json.dumps(settings, sort_keys=True)}"
             f"\0{user_backend_words(timing.conv_tf32)}\0{library_words()}")
    return cache_key(words, source, digits=24)  # 24: the length entries on disk were made with


@dataclass
class BaselineStore:
    """Stored baseline times by key; kept in a JSON file when given a path, else in memory."""

    path: Path | None = None
    gpu: str = ""
    fresh: bool = False  # entries found on disk are not read: they are timed again
    _entries: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _put_here: set[str] = field(default_factory=set, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.path is None:
            return
        try:
            self._entries = json.loads(self.path.read_text())["tasks"]
        except (OSError, ValueError, KeyError, TypeError):
            self._entries = {}

    @classmethod
    def for_gpu(cls, cache_dir: Path, gpu: str, fresh: bool = False) -> "BaselineStore":
        """The store on disk for one GPU model, shared by every suite on it."""
        return cls(per_gpu_file(cache_dir, "baselines", gpu), gpu, fresh)

    def get(self, key: str) -> StoredTimes | None:
        with self._lock:
            entry = self._entries.get(key)
            if self.fresh and key not in self._put_here:
                entry = None
        if not isinstance(entry, dict) or not entry.get("measures"):
            return None
        return StoredTimes(entry["measures"], str(entry.get("measured_at", "")),
                           tuple(entry.get("notes", ())))

    def put(self, key: str, measures: Measures, notes: tuple[str, ...] = ()) -> StoredTimes:
        measured_at = time.strftime("%Y-%m-%dT%H:%M:%S")
        entry = {"measures": measures, "measured_at": measured_at, "notes": list(notes)}
        with self._lock:
            self._entries[key] = entry
            self._put_here.add(key)
            self._write()
        return StoredTimes(measures, measured_at, notes)

    def discard(self, key: str) -> None:
        with self._lock:
            if self._entries.pop(key, None) is not None:
                self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        write_json_whole(self.path, {"gpu": self.gpu, "tasks": self._entries})
