"""Modules a worker's first torch.compile imports, remembered so the forkserver imports them ahead.

torch.compile imports about 170 modules of inductor, Triton and sympy on
its first call in a process (bench/warm_start.py: 3.0 s of a worker's
warm-up on the GPU machine, 1.8 s with them imported ahead). Which ones
depends on the versions of torch and Triton, so they are learned, not
listed: a worker reports what its warm-up imported, the judge keeps the
names here (per versions), and the next forkserver preloads them
(preload.py). Only modules of torch, Triton and their own dependencies are
kept, never one of a task or a candidate; none of them initialises CUDA.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}(\.[A-Za-z_][A-Za-z0-9_]{0,39})*")
_PACKAGES = ("torch.", "triton.", "sympy.", "functorch.", "mpmath.")
_SKIPPED = ("torch._inductor.runtime.compile_tasks",)  # generated, one per compiled kernel
_LIMIT = 2000
FILE = "preload-modules.json"


def versions_key() -> str:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    return f"python {sys.version.split()[0]} torch {torch.__version__} triton {triton_version}"


def keepable(names: list[str]) -> list[str]:
    return sorted({n for n in names if isinstance(n, str) and _NAME.fullmatch(n)
                   and n.startswith(_PACKAGES) and not n.startswith(_SKIPPED)})[:_LIMIT]


def read(cache_dir: Path) -> list[str]:
    """The names kept for these versions (none if the file is missing or unreadable)."""
    try:
        kept = json.loads((cache_dir / FILE).read_text()).get(versions_key(), [])
    except (OSError, ValueError, AttributeError):
        return []
    return keepable(kept if isinstance(kept, list) else [])


def remember(cache_dir: Path, names: list[str]) -> None:
    """Add names to the file, written whole (a reader never sees half of it)."""
    new = keepable(names)
    if not new:
        return
    path = cache_dir / FILE
    try:
        kept = json.loads(path.read_text())
        kept = kept if isinstance(kept, dict) else {}
    except (OSError, ValueError):
        kept = {}
    key = versions_key()
    merged = keepable(list(kept.get(key, [])) + new)
    if merged == kept.get(key):
        return
    kept = {key: merged}  # other versions' lists are stale once these run
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=cache_dir, prefix=".preload-")
        with os.fdopen(handle, "w") as file:
            json.dump(kept, file)
        os.replace(temporary, path)
    except OSError:
        pass  # the list only saves time
