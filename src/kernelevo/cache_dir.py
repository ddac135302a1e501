"""KernelEvo's cache folder, and Python bytecode kept in it where the environment forbids writing it.

Light on purpose (the standard library only): the command line calls
`keep_bytecode()` before it imports torch.

On a machine that sets PYTHONDONTWRITEBYTECODE and ships no bytecode (the GPU
machine here: torch's imports then take 13-14 s in every new process, 5.5 s
once their bytecode exists; bench/RESULTS.md), Python compiles every module
of torch, dynamo and inductor from source in each process. `keep_bytecode`
keeps that bytecode under the cache folder instead (sys.pycache_prefix), so
nothing is written beside any source. It changes nothing where bytecode may
be written or a prefix is set; KERNELEVO_BYTECODE_CACHE=0 turns it off.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def default_cache_dir() -> Path:
    root = os.environ.get("KERNELEVO_CACHE_DIR") or Path.home() / ".cache" / "kernelevo"
    return Path(root)


def keep_bytecode(cache_dir: Path | None = None) -> Path | None:
    """Write bytecode under the cache folder where it would not be written; the folder used."""
    if os.environ.get("KERNELEVO_BYTECODE_CACHE", "1") == "0":
        return None
    if not sys.flags.dont_write_bytecode or sys.pycache_prefix:
        return None  # bytecode is written already (beside sources, or where the user said)
    folder = (cache_dir or default_cache_dir()) / "pycache"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # an unwritable cache folder costs only time
    sys.pycache_prefix = str(folder)
    sys.dont_write_bytecode = False
    # Python processes started from here (the forkserver of the judges) do the same.
    os.environ["PYTHONPYCACHEPREFIX"] = str(folder)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    return folder
