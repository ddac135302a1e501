"""CUDA candidates built ahead, in the judge's process, with no GPU: `prebuild_source`.

A candidate's `load_inline` build runs in a child with no GPU visible, into
the shared build cache, before the candidate is judged; the worker that
judges it then finds the build by its key (cuda/build.py) and only loads it,
so the GPU waits for timing rather than for nvcc. A build the compiler
refuses is remembered in that cache too, and reported at once.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from kernelevo.cache_dir import cache_key, default_cache_dir
from kernelevo.config import EvalConfig
from kernelevo.evaluate.child.worker import run_prebuild
from kernelevo.evaluate.sandbox.environment import cache_environment
from kernelevo.evaluate.sandbox.jobs import run_job
from kernelevo.evaluate.sandbox.pipe import JobResult
from kernelevo.evaluate.shared.messages import PrebuildDone, PrebuildJob

# Sources this process has prebuilt (built, or refused by the compiler), by
# source and build environment: a suite builds its CUDA solutions ahead, and
# the judge's own prebuild of one then starts no process to find it cached.
_prebuilt: set[str] = set()
_prebuilt_lock = threading.Lock()
# Scratch folders of prebuild jobs still running: a job finishing a header
# after its answer is a daemon thread, cut off when the process exits, so the
# exit removes what it left.
_scratches: set[Path] = set()


@atexit.register
def _remove_scratches() -> None:
    for scratch in list(_scratches):
        shutil.rmtree(scratch, ignore_errors=True)


def _prebuild_key(source: str, environment: dict[str, str]) -> str:
    return cache_key(*(f"{k}={v}" for k, v in sorted(environment.items())), source)


def build_environment(cache_dir: Path | None = None) -> dict[str, str]:
    """The build caches a child uses: the user's own where set, else under `cache_dir`.

    A prebuild names them itself: a suite's builds ahead start before any
    judge has put them in this process's environment, and a build into a
    child's own (empty, thrown away) home would be made again by the worker.
    """
    defaults = cache_environment(cache_dir or default_cache_dir())
    return {key: os.environ.get(key, value) for key, value in defaults.items()}


def prebuild_source(source: str, config: EvalConfig, environment: dict[str, str],
                    cache_dir: Path | None = None) -> float:
    """Build a CUDA candidate's extensions into the shared cache, with no GPU; seconds spent.

    A build the compiler refuses is remembered there too (cuda/build.py), so
    the worker that judges the candidate reports it without compiling again.
    A source this process prebuilt already costs nothing (0.0).
    """
    environment = {**build_environment(cache_dir), **environment, "CUDA_VISIBLE_DEVICES": ""}
    key = _prebuild_key(source, environment)
    with _prebuilt_lock:
        if key in _prebuilt:
            return 0.0
    answer = _Answer()
    scratch = Path(tempfile.mkdtemp(prefix="kernelevo-build-"))
    _scratches.add(scratch)

    def job() -> None:
        try:
            answer.result = run_job(run_prebuild, PrebuildJob(source, str(scratch)).to_json(),
                                    scratch, config.build_timeout_s, config.output_limit_bytes,
                                    on_message=answer.heard, environment=environment)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            answer.error = exc
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            _scratches.discard(scratch)
            answer.ready.set()

    # The job goes on after its answer while it finishes a precompiled header
    # the build started (run_prebuild); the caller goes on at the answer.
    threading.Thread(target=job, name="kernelevo-prebuild", daemon=True).start()
    answer.ready.wait()
    if answer.error is not None:
        raise answer.error
    final = answer.done or (answer.result.final if answer.result else None)
    if not final:  # cut short (its limit, a crash): the worker builds it again
        return 0.0
    with _prebuilt_lock:
        _prebuilt.add(key)
    return PrebuildDone.from_json(final).build_s


class _Answer:
    """A prebuild job's answer, heard before its process ends."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.done: dict[str, Any] | None = None
        self.result: JobResult | None = None
        self.error: BaseException | None = None

    def heard(self, message: dict[str, Any]) -> None:
        if message.get("kind") == PrebuildDone.kind and self.done is None:
            self.done = message
            self.ready.set()


def forget_prebuilt() -> None:
    """Forget what this process built ahead (the cache on disk still answers)."""
    with _prebuilt_lock:
        _prebuilt.clear()
