"""The compilers a load_inline build runs: the stand-ins of `cuda_shims`, installed where ninja looks.

torch's cpp_extension runs `$CXX` on the host file and `$PYTORCH_NVCC` on the
CUDA file. For the builds inside `compiler_shims()`, both point at small shell
scripts in the extensions folder that hand real compiles to `cuda_shims` and
everything else (version queries, the link) straight to the real compiler.

The scripts live at fixed paths: ninja compares command lines, so the build a
CPU-only child makes ahead and the worker's later load see the same ones, and
the load stays a no-op. KERNELEVO_COMPILER_SHIMS=0 (a debug switch, read at
call time) turns them off: torch's compilers, as they are.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from kernelevo.evaluate.cuda.shims_nvcc import write_light_header

SWITCH = "KERNELEVO_COMPILER_SHIMS"
_SHIMS = Path(__file__).with_name("shims.py")
_installed: dict[Path, dict[str, str]] = {}


def shims_enabled() -> bool:
    return os.environ.get(SWITCH, "1") != "0"


@contextlib.contextmanager
def compiler_shims() -> Iterator[dict[str, str]]:
    """CXX and PYTORCH_NVCC pointed at the stand-ins for the builds inside; yields what was set."""
    shims = install_shims(extensions_root() / "kernelevo-tools") if shims_enabled() else {}
    saved = {key: os.environ.get(key) for key in shims}
    os.environ.update(shims)
    try:
        yield shims
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def extensions_root() -> Path:
    from torch.utils import cpp_extension

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root())


def install_shims(folder: Path) -> dict[str, str]:
    """Write the stand-in scripts (once per process and folder); the variables that select them.

    A host compiler that is not GCC, or a PYTORCH_NVCC the user set, is left
    alone: the stand-ins know GCC's precompiled headers and nvcc's own plan.
    """
    if folder in _installed:
        return _installed[folder]
    from torch.utils import cpp_extension

    found: dict[str, str] = {}
    cxx = _gcc(os.environ.get("CXX", "c++"))
    nvcc = Path(cpp_extension.CUDA_HOME or "/nonexistent") / "bin" / "nvcc"
    try:
        if cxx:  # named g++ so that torch's compiler check recognises it
            found["CXX"] = write_script(folder / "g++", "cxx", cxx, str(folder / "pch"))
        if "PYTORCH_NVCC" not in os.environ and nvcc.is_file():
            light = write_light_header(folder / "light")
            found["PYTORCH_NVCC"] = write_script(folder / "nvcc", "nvcc", str(nvcc), str(light))
    except OSError:
        found = {}  # a folder we cannot write to: torch's own compilers, as they are
    _installed[folder] = found
    return found


def _gcc(name: str) -> str | None:
    """The GCC that `name` runs, or None (another compiler, or a wrapper with arguments)."""
    path = shutil.which(name) if " " not in name.strip() else None
    if path is None:
        return None
    try:
        about = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    return path if "gcc version" in about and "clang" not in about else None


def script_text(role: str, real: str, *extra: str) -> str:
    """A shell script: compiles (`-c` among the arguments) go to cuda_shims, the rest to `real`.

    Version queries and the link then cost no Python start, which keeps a
    cached load (torch asks the compiler its version each time) fast.
    """
    shim = " ".join(shlex.quote(part) for part in
                    (sys.executable, "-S", "-E", str(_SHIMS), role, real, *extra))
    return ("#!/bin/sh\n"
            'for argument in "$@"; do\n'
            f'  if [ "$argument" = "-c" ]; then exec {shim} "$@"; fi\n'
            "done\n"
            f'exec {shlex.quote(real)} "$@"\n')


def write_script(path: Path, role: str, real: str, *extra: str) -> str:
    """Write the script for `role` at `path` if it differs (atomically); its path."""
    text = script_text(role, real, *extra)
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(text)
        partial.chmod(0o755)
        os.replace(partial, path)
    return str(path)
