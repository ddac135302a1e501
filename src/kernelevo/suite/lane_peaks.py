"""What a lane judging a task held on the GPU in earlier suites: its lane's size where known.

suite/footprint.py estimates a lane's GPU memory from the task's sizes alone.
Against what the rows held it errs small: on an H100 the oracle, the worker and
the re-check's two processes held up to twice the estimate (level-2 2D and 3D
convolutions: 18.6 GiB against 8.5), and eight rows a pass ran out of memory
beside other lanes and were judged again alone (bench/RESULTS.md, session 37).
Each suite row on a GPU says what its processes held (`gpu_peak_bytes`, the
allocators' peaks); they are kept here per GPU model in the cache folder, the
largest seen for each task, and a later suite on that model sizes the task's
lane from them: the data of one session (oracle and worker) for each session
the lane holds at once, the re-check's beside them, and each process's CUDA
context on top.

No margin is added: the four peaks, summed as if they came at once, already
hold more than a lane does at any moment. Replayed on session 37's second
pass (each row's span as recorded, its lane sized from the first pass's
peaks), these sizes summed above the 79 GiB an H100 frees for 31 s, the
seconds in which that pass's rows ran out of memory; with 15 % more, for
62 s. A peak includes the candidate's own allocations, so another solution of
the task may hold more: a row that runs out anyway is judged again alone
(suite/alone.py), and its peaks are then recorded for the next suite.

An entry's key holds what the peaks depend on: the task's source (its sizes
included), the precision, the number of input sets and whether the backward
is judged.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from kernelevo.cache_dir import cache_key, per_gpu_file, write_json_whole
from kernelevo.suite.footprint import lane_contexts

_FORMAT = "lane-peaks-1"
SESSION_PARTS = ("oracle", "worker")
RECHECK_PARTS = ("recheck_oracle", "recheck_worker")


def peaks_key(source: str, dtype_name: str, input_sets: int, backward: bool) -> str:
    return cache_key(f"{_FORMAT}\0{dtype_name}\0{input_sets}\0{int(backward)}", source)


class LanePeaks:
    """The largest GPU peaks recorded per task; kept in a JSON file when given a path."""

    def __init__(self, path: Path | None = None, gpu: str = "") -> None:
        self.path, self.gpu = path, gpu
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, int]] = {}
        if path is not None:
            try:
                found = json.loads(path.read_text())["tasks"]
                self._entries = {k: {p: int(b) for p, b in v.items()}
                                 for k, v in found.items() if isinstance(v, dict)}
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                self._entries = {}  # unreadable: sized from the tasks' sizes, as with none

    @classmethod
    def for_gpu(cls, cache_dir: Path, gpu: str) -> "LanePeaks":
        return cls(per_gpu_file(cache_dir, "lane_peaks", gpu), gpu)

    def record(self, key: str, peaks: dict[str, Any]) -> None:
        """Keep the largest of each process's peak for the task (bytes, from a row)."""
        found = {part: int(peaks[part]) for part in SESSION_PARTS + RECHECK_PARTS
                 if isinstance(peaks.get(part), (int, float)) and peaks[part] > 0}
        if not found:
            return
        with self._lock:
            entry = self._entries.setdefault(key, {})
            grown = {p: b for p, b in found.items() if b > entry.get(p, 0)}
            if not grown:
                return
            entry.update(grown)
            self._write()

    def lane_bytes(self, key: str, sessions: int) -> int | None:
        """The lane's size from the recorded peaks, `sessions` of the task's data held at
        once (a standby beside the evaluation: 2); None where none is recorded."""
        with self._lock:
            entry = dict(self._entries.get(key, {}))
        if not any(part in entry for part in SESSION_PARTS):
            return None
        session = sum(entry.get(part, 0) for part in SESSION_PARTS)
        recheck = sum(entry.get(part, 0) for part in RECHECK_PARTS)
        return lane_contexts(sessions, recheck > 0) + sessions * session + recheck

    def rechecked(self, key: str) -> bool:
        """Whether the task's recorded peaks hold a re-check's (its lane runs its processes)."""
        with self._lock:
            return any(part in self._entries.get(key, {}) for part in RECHECK_PARTS)

    def _write(self) -> None:
        if self.path is None:
            return
        try:
            write_json_whole(self.path, {"gpu": self.gpu, "tasks": self._entries})
        except OSError:
            pass  # a cache folder that cannot be written: the next suite estimates from sizes
