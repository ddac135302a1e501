"""KernelEvo's cache folder, the keys of what is kept, and Python bytecode kept in it where
none is shipped or written.

Light on purpose (the standard library only): the command line calls
`keep_bytecode()` before it imports torch, and the judges' forkserver
before its own imports.

On a machine that sets PYTHONDONTWRITEBYTECODE and ships torch without
bytecode (the GPU machine here: torch's imports then take 13-14 s in every
new process, 5.5 s once their bytecode exists; bench/RESULTS.md), Python
compiles every module of torch, dynamo and inductor from source in each
process. `keep_bytecode` keeps that bytecode under the cache folder instead
(sys.pycache_prefix), so nothing is written beside any source. It changes
nothing where bytecode may be written, where torch's own bytecode is there
to read (a prefix would hide it), or where a prefix is set already;
KERNELEVO_BYTECODE_CACHE=0 turns it off.

When it sets up a folder that holds no bytecode yet (a fresh machine), it
also starts `compileall` over torch and the packages a judge imports, on
every core, in a process of its own: the command's own imports then find
most modules compiled instead of compiling them one by one on one core.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

_OURS = "KERNELEVO_PYCACHE"  # the folder, as set for this process's children


# Hex digits a key keeps: 64 bits, so two different inputs share a key about
# once in 10^19 pairs. Keys that name what is already on users' disks keep the
# length they were made with (a new length would orphan those entries).
KEY_DIGITS = 16


def cache_key(*parts: str, digits: int | None = KEY_DIGITS) -> str:
    """The key of what `parts` determine: SHA-256 of the parts joined by NUL, in hex,
    its first `digits` digits (None: all 64).

    The one recipe for every cache and identity key (builds, prebuilds, task
    and source hashes, model module names); the compiler stand-ins, which run
    without KernelEvo importable, repeat it in cuda/shims_host.py.
    """
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return digest if digits is None else digest[:digits]


def default_cache_dir() -> Path:
    root = os.environ.get("KERNELEVO_CACHE_DIR") or Path.home() / ".cache" / "kernelevo"
    return Path(root)


def keep_bytecode(cache_dir: Path | None = None, probe: str = "torch") -> Path | None:
    """Read and write bytecode under the cache folder where it would be neither; the folder."""
    if os.environ.get("KERNELEVO_BYTECODE_CACHE", "1") == "0":
        return None
    if sys.pycache_prefix:
        if os.environ.get(_OURS) != sys.pycache_prefix:
            return None  # the user's own prefix
        # A child of a process that set it up (multiprocessing passes -B on).
        sys.dont_write_bytecode = False
        return Path(sys.pycache_prefix)
    if not sys.flags.dont_write_bytecode or _shipped(probe):
        return None
    folder = (cache_dir or default_cache_dir()) / "pycache"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # an unwritable cache folder costs only time
    sys.pycache_prefix = str(folder)
    sys.dont_write_bytecode = False
    # Python processes started from here (the forkserver of the judges) do the same.
    os.environ["PYTHONPYCACHEPREFIX"] = os.environ[_OURS] = str(folder)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    compile_ahead(folder)
    return folder


# What a judge imports, compiled ahead on a fresh machine (torch's own imports
# of sympy, numpy and jinja2 are inductor's).
AHEAD_PACKAGES = ("torch", "triton", "sympy", "mpmath", "numpy", "jinja2", "kernelevo")
AHEAD_MIN_CORES = 4  # on fewer, compileall takes the cores the command's own imports need
_AHEAD_MARK = "compile-ahead-started"


def compile_ahead(folder: Path, packages: tuple[str, ...] = AHEAD_PACKAGES) -> bool:
    """Start compiling `packages` into `folder` on every core, once per folder; whether it did.

    A background process (its own session, output discarded): the command
    goes on at once, and imports that come before compileall reaches them
    compile as they would have. Once started, a folder is not compiled
    again (a mark file, created exclusively, so two commands starting
    together start one compile).
    """
    if (os.cpu_count() or 1) < AHEAD_MIN_CORES:
        return False
    roots = [root for name in packages for root in _package_roots(name)]
    if not roots:
        return False
    try:
        os.close(os.open(folder / _AHEAD_MARK, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError:
        return False  # started before (or the folder is not writable)
    environment = {**os.environ, "PYTHONPYCACHEPREFIX": str(folder)}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        subprocess.Popen([sys.executable, "-m", "compileall", "-q", "-j", "0",
                          "-x", r"[/\\]tests?[/\\]", *roots], env=environment,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return False
    return True


def _package_roots(name: str) -> list[str]:
    """The folders of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [str(location) for location in spec.submodule_search_locations]


def _shipped(module: str) -> bool:
    """Whether the module's bytecode lies beside its source (found without importing it)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    return os.path.exists(importlib.util.cache_from_source(spec.origin))


def per_gpu_file(cache_dir: Path, folder: str, gpu: str) -> Path:
    """A file kept for one GPU model under the cache folder: `<folder>/<model's slug>.json`."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", gpu).strip("-").lower() or "gpu"
    return cache_dir / folder / f"{slug}.json"


def write_json_whole(path: Path, data: Any) -> None:
    """`data` as JSON at `path`, whole or not at all: written to a scratch file of this
    process and thread, then renamed over it, so a reader never sees a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    scratch.write_text(json.dumps(data, indent=1))
    os.replace(scratch, path)
