"""The environment a candidate's process starts with: an allow-list, never the judge's own.

The judge's environment holds whatever its user keeps there (a
DATABASE_URL, a GITHUB_PAT, cloud credentials under any name); a candidate
that raises with what it read would put it in its verdict, and so in the
next prompt to the LLM's provider. Only the variables torch, Triton, CUDA,
the C/C++ compiler, Python and kernelevo's own worker read are passed on;
among them, a name that looks secret (redact.py) or a value that carries a
URL's password is still left out. docs/evaluation.md lists them.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from kernelevo.evaluate.sandbox.redact import is_secret

# Variables passed on by their exact name.
ALLOWED_NAMES = frozenset({
    # the process, its user and its locale (HOME is the sandbox's private home by then)
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "LANG", "LANGUAGE", "TMPDIR",
    # Python's own
    "PYTHONPATH", "PYTHONHOME", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE",
    "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONNOUSERSITE", "PYTHONWARNINGS",
    "PYTHONFAULTHANDLER", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONSAFEPATH",
    # the C/C++ compiler and linker, as torch's extension builds and Triton's launchers call them
    "CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CPATH", "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "LD_LIBRARY_PATH", "CONDA_PREFIX",
    # ptxas, as Triton passes its options on
    "PTXAS_OPTIONS", "DISABLE_PTXAS_OPT",
    # how many compile jobs torch's extension builds run
    "MAX_JOBS",
})
# Variables passed on by their prefix: the libraries' and the driver's knobs,
# and kernelevo's own (the worker reads its switches at call time, cache_dir.py
# and cuda/ among them).
ALLOWED_PREFIXES = ("LC_", "CUDA_", "CUDNN_", "CUBLAS_", "NVIDIA_", "NVCC_", "TRITON_",
                    "TORCH_", "TORCHINDUCTOR_", "TORCHDYNAMO_", "PYTORCH_", "OMP_", "MKL_",
                    "KMP_", "KERNELEVO_")
# scheme://user:password@host: credentials, whatever the variable's name.
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@")
_spawned: list[subprocess.Popen] = []  # forkservers, kept so that no Popen reaps one


def is_allowed(name: str) -> bool:
    """Whether a candidate may see the variable `name` (before its value is looked at)."""
    return ((name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES))
            and not is_secret(name))


def candidate_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """The variables of `environment` a candidate's process may start with."""
    return {name: value for name, value in environment.items()
            if is_allowed(name) and not _URL_PASSWORD.search(value)}


@contextlib.contextmanager
def spawning_with_candidate_environment() -> Iterator[None]:
    """Processes multiprocessing starts inside (the forkserver) get only a candidate's environment.

    A forkserver's children are forked from it: the environment it was
    started with is what their /proc/self/environ shows, whatever they set.
    """
    from multiprocessing import util

    # Typed as typeshed types spawnv_passfds (its args are the command line, not ints)
    def spawn(path: str | bytes, args: Sequence[Any], passfds: Sequence[int]) -> int:
        process = subprocess.Popen(args, executable=path, pass_fds=tuple(passfds),
                                   env=candidate_environment(os.environ), restore_signals=False)
        _spawned.append(process)  # multiprocessing reaps it
        return process.pid

    original = util.spawnv_passfds
    util.spawnv_passfds = spawn
    try:
        yield
    finally:
        util.spawnv_passfds = original


def cache_environment(cache_dir: Path) -> dict[str, str]:
    """Environment that points every build cache at one folder, keyed by content."""
    return {
        "TRITON_CACHE_DIR": str(cache_dir / "triton"),
        "TORCH_EXTENSIONS_DIR": str(cache_dir / "torch_extensions"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "inductor"),
        "MAX_JOBS": os.environ.get("MAX_JOBS", str(min(8, os.cpu_count() or 1))),
        # A pool of compile processes costs seconds to start and is not needed
        # once the caches are warm; it would also look like spawned processes.
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
    }
