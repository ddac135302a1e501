"""The host compiler's stand-in: a precompiled torch/extension.h (shims.py).

main.cpp starts with `#include <torch/extension.h>`. That header is compiled
once per (compiler, flags, torch) into a GCC precompiled header in the
extensions folder (beside the first compile of those flags, which runs as
usual), and each later main.cpp with the same flags reads it instead of
parsing torch again. GCC checks that a precompiled header fits the compile
and otherwise ignores it; either way the object is the same.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

try:  # imported as part of the package
    from kernelevo.evaluate.cuda.shims_shared import (HEADER, SIBLING_FAILED, compile_in_build,
                                                      record)
except ImportError:  # run as the stand-in script (python -S -E shims.py): its folder leads sys.path
    from shims_shared import (HEADER, SIBLING_FAILED, compile_in_build, record)  # type: ignore[no-redef]

KEPT_HEADERS = 3  # one precompiled header is ~0.8 GB; a run uses one or two flag sets
_SOURCE = re.compile(r".*\.(cpp|cc|cxx|c\+\+)$")
_INCLUDE_OPTIONS = {"-I", "-isystem", "-iquote", "-idirafter"}  # with their folder apart
_PER_OBJECT_OPTIONS = {"-MF", "-MT", "-MQ", "-o"}  # and their value: not the header's concern
_DEPENDENCY_OPTIONS = {"-MMD", "-MD", "-MP"}


def host_plan(args: list[str]) -> tuple[list[str], Path] | None:
    """For a compile of a file that starts with torch/extension.h: (PCH flags, the header)."""
    flags, sources, position = [], [], 0
    while position < len(args):
        arg = args[position]
        if arg in _PER_OBJECT_OPTIONS or arg in _INCLUDE_OPTIONS:
            if arg in _INCLUDE_OPTIONS:
                flags += args[position:position + 2]
            position += 2
            continue
        if arg in ("-x", "-include", "-imacros", "-E", "-S") or arg.startswith("-Wp,"):
            return None  # not a plain compile of one source
        if _SOURCE.match(arg) and not arg.startswith("-"):
            sources.append(arg)
        elif arg != "-c" and arg not in _DEPENDENCY_OPTIONS and not arg.startswith(
                "-DTORCH_EXTENSION_NAME="):  # the one flag that differs between extensions
            flags.append(arg)
        position += 1
    if "-c" not in args or len(sources) != 1 or not _starts_with_header(Path(sources[0])):
        return None
    header = _find_header(flags)
    return (flags, header) if header else None


def _starts_with_header(source: Path) -> bool:
    try:
        with source.open() as handle:
            first = handle.readline().strip()
    except OSError:
        return False
    return first == f"#include <{HEADER}>"


def _find_header(flags: list[str]) -> Path | None:
    """torch/extension.h as the compiler finds it: -I folders first, then -isystem ones."""
    user: list[str] = []
    system: list[str] = []
    for position, flag in enumerate(flags):
        for option, found in (("-I", user), ("-isystem", system)):
            if flag == option and position + 1 < len(flags):
                found.append(flags[position + 1])
            elif flag.startswith(option) and flag != option:
                found.append(flag[len(option):])
    for folder in user + system:
        if (Path(folder) / HEADER).is_file():
            return Path(folder) / HEADER
    return None


def pch_key(compiler: str, flags: list[str], header: Path) -> str:
    """What a precompiled header depends on: compiler binary, flags, torch's headers."""
    real = Path(compiler).resolve()
    version = header.parents[2] / "version.py"  # torch/include/torch/extension.h -> torch/
    parts = [str(real), _stamp(real), *flags, str(header), _stamp(header),
             version.read_text() if version.is_file() else ""]
    # cache_dir.cache_key's recipe, written out: this stand-in runs without KernelEvo
    # importable. 20 digits: the headers users have built are kept under these names.
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def _stamp(path: Path) -> str:
    status = path.stat()
    return f"{status.st_size}:{status.st_mtime_ns}"


def claim_pch(compiler: str, flags: list[str], header: Path,
              store: Path) -> tuple[Path, Any | None]:
    """The header's folder, and a held lock if this process is to build it (else None).

    Only one process builds a given header; the others compile without it
    meanwhile rather than wait. A header that failed to build is not retried.
    """
    folder = store / f"host-{pch_key(compiler, flags, header)}"
    if (folder / f"{HEADER}.gch").is_file() or (folder / "failed.log").is_file():
        return folder, None
    (folder / "torch").mkdir(parents=True, exist_ok=True)
    lock = open(folder / "lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        record({"role": "cxx", "pch": "busy"})
        return folder, None
    if (folder / f"{HEADER}.gch").is_file():  # finished while this one looked
        lock.close()
        return folder, None
    for stale in (folder / "torch").glob("*.partial"):  # from a builder killed midway
        stale.unlink(missing_ok=True)
    return folder, lock


def start_pch(compiler: str, flags: list[str], header: Path, folder: Path, store: Path,
              keep: list[int]) -> subprocess.Popen:
    """Start building the header into `folder`: this script's `pch` role (build_pch).

    The builder puts the header in place itself, so it may outlive the compile
    that started it; `keep`, the descriptors it holds while it runs (the
    header's lock, a background registration), pass to it.
    """
    partial = folder / f"{HEADER}.gch.{os.getpid()}.partial"
    script = Path(__file__).with_name("shims.py")
    # A group of its own, so that giving it up ends GCC's cc1plus too (abandon_pch).
    return subprocess.Popen([sys.executable, "-S", "-E", str(script), "pch", compiler,
                             str(folder), str(store), str(partial), str(header), *flags],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=os.setpgrp,
                            pass_fds=keep)  # this script runs no threads


def build_pch(compiler: str, folder: Path, store: Path, partial: Path, header: Path,
              flags: list[str]) -> int:
    """The header's builder (role `pch`): compile it, put it in place or note why it failed."""
    started = time.perf_counter()
    log = partial.with_name(partial.name.replace(".partial", ".log"))
    with open(log, "w+") as output:
        code = subprocess.run([compiler, *flags, "-x", "c++-header", str(header), "-o",
                               str(partial)], stdout=output, stderr=subprocess.STDOUT).returncode
        if code == 0:
            os.replace(partial, folder / f"{HEADER}.gch")
        else:
            partial.unlink(missing_ok=True)
            if code > 0:  # the compiler refused (killed by a signal: try again later)
                output.seek(0)
                (folder / "failed.log").write_text(output.read()[-20000:])
    log.unlink(missing_ok=True)
    record({"role": "cxx", "pch": "built" if code == 0 else "failed",
            "pch_build_s": round(time.perf_counter() - started, 3)})
    if code == 0:
        _evict(store, keep=KEPT_HEADERS)
    return code


def _evict(store: Path, keep: int) -> None:
    built = sorted(store.glob(f"host-*/{HEADER}.gch"), key=lambda p: p.stat().st_mtime,
                   reverse=True)
    for old in built[keep:]:
        old.unlink(missing_ok=True)  # a compile reading it keeps its open copy


def run_host(compiler: str, store: Path, args: list[str]) -> None:
    """Stand-in for the host compiler: compile with the precompiled header where one fits.

    The first compile of a flag set compiles as usual while it builds the
    header for the next ones (which takes about twice a plain compile). A build
    that works waits for the header, unless $KERNELEVO_PCH_BACKGROUND names a
    folder: then the header's build goes on after this compile (registered
    there, for the process that waits for it: cuda/build.py). One that fails,
    in this file or in the CUDA file beside it (SIBLING_FAILED), gives the
    header up and fails after its own compile. GCC checks that a header fits
    and otherwise reads the source's own; the object is the same either way.
    """
    plan = host_plan(args)
    if plan is None:
        os.execvp(compiler, [compiler, *args])
    folder, lock = claim_pch(compiler, *plan, store)
    if lock is None:
        built = (folder / f"{HEADER}.gch").is_file()
        if built:
            os.utime(folder / f"{HEADER}.gch")  # recently used: kept by the eviction
            record({"role": "cxx", "pch": "used"})
        sys.exit(compile_in_build([compiler, *([f"-I{folder}"] if built else []), *args]))
    background = os.environ.get(BACKGROUND)
    registration = register_background(Path(background)) if background else None
    builder = start_pch(compiler, *plan, folder, store,
                        [lock.fileno(), *([registration.fileno()] if registration else [])])
    code = compile_in_build([compiler, *args])
    if code == 0 and registration is not None:
        record({"role": "cxx", "pch": "background"})
        sys.exit(0)  # the builder holds the lock and the registration till it is done
    # A build that has failed (this file, or the CUDA file beside it) gives up
    # the header rather than wait for it: the failure is reported after one
    # compile, not after the header's (about twice as long).
    if not (code == 0 and _wait_unless_sibling_failed(builder)
            or _ended(builder, _FLAGS_FAIL_S)):  # refused at once (its flags): noted by it
        abandon_pch(builder, folder)
    lock.close()
    sys.exit(code)


# Where the process that runs a build learns of headers still being built
# after it (a folder of locked files, one per builder): BACKGROUND.
BACKGROUND = "KERNELEVO_PCH_BACKGROUND"


def register_background(folder: Path) -> Any:
    """An open, locked file in `folder` that a header's builder holds until it is done."""
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / f"pch.{os.getpid()}", "w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def wait_for_background(folder: Path, timeout_s: float) -> bool:
    """Wait until every header registered in `folder` is built (or given up); False: timed out."""
    deadline = time.monotonic() + timeout_s
    for path in sorted(folder.glob("pch.*")) if folder.is_dir() else ():
        with open(path) as handle:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        return False
                    time.sleep(0.1)
    return True


# A header build that fails over its flags does so at once: a failed compile
# waits this long for it, so such a header is noted and never tried again.
_FLAGS_FAIL_S = 1.0


def _ended(process: subprocess.Popen, within_s: float) -> bool:
    try:
        process.wait(timeout=within_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def _wait_unless_sibling_failed(builder: subprocess.Popen) -> bool:
    """Wait for the header's build; False as soon as another compile of this build failed."""
    while builder.poll() is None:
        if Path(SIBLING_FAILED).exists():
            return False
        time.sleep(0.1)
    return True


def abandon_pch(builder: subprocess.Popen, folder: Path) -> None:
    """Stop building the header (a later build makes it); remove what it wrote."""
    if builder.poll() is None:
        try:
            os.killpg(builder.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        builder.wait()
    for name in (f"{HEADER}.gch.{os.getpid()}.partial", f"{HEADER}.gch.{os.getpid()}.log"):
        (folder / name).unlink(missing_ok=True)
    record({"role": "cxx", "pch": "abandoned"})
