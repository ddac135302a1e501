"""Runtime guards inside the candidate's process.

Each guard gives a static check its dynamic side: the harness functions the
judge relies on must be the same objects after the candidate ran, no thread
or process may outlive a call, no file may appear, outputs must be plain
tensors with storage, and stale allocator memory is poisoned with NaN.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import torch

_WATCHED = (
    (torch, ("allclose", "isclose", "equal", "isfinite", "save", "load", "empty", "empty_like")),
    (torch.cuda, ("synchronize", "Event", "current_stream", "graph", "CUDAGraph")),
    (torch.Tensor, ("clone", "copy_", "cpu", "to", "__eq__", "double", "float", "abs", "sub",
                    "detach", "contiguous", "item", "numel", "fill_", "__new__",
                    "__torch_function__")),
    (time, ("perf_counter", "perf_counter_ns", "monotonic", "time", "sleep")),
    (torch.testing, ("assert_close",)),
)


class HarnessSnapshot:
    """Identities of the functions the harness trusts, taken before the candidate loads."""

    def __init__(self, extra_modules: tuple[Any, ...] = ()) -> None:
        self._watched = [(owner, name, owner.__dict__.get(name, getattr(owner, name, None)))
                         for owner, names in _WATCHED for name in names]
        for module in extra_modules:
            self._watched += [(module, name, value) for name, value in vars(module).items()
                              if callable(value) and not name.startswith("__")]

    def tampered(self) -> list[str]:
        """Names of watched functions that are no longer the original objects."""
        changed = []
        for owner, name, original in self._watched:
            current = owner.__dict__.get(name, getattr(owner, name, None))
            if current is not original:
                changed.append(f"{getattr(owner, '__name__', owner)}.{name}")
        return changed


class ProcessWatch:
    """Threads, child processes and files that appear while a candidate runs.

    snapshot() notes what exists now; new_since(snapshot) names what appeared
    since, so in a job of several candidates each is charged only with what
    appeared during its own steps.
    """

    def __init__(self, workdir: Path) -> None:
        self._workdir = workdir

    def snapshot(self) -> tuple[set[int | None], set[int], set[str]]:
        return ({t.ident for t in threading.enumerate()}, set(self.children()),
                self._listing())

    def new_since(self, seen: tuple[set[int | None], set[int], set[str]]) -> dict[str, list]:
        threads, children, files = seen
        return {"threads": [t.name for t in threading.enumerate()
                            if t.ident not in threads and t.is_alive()],
                "children": sorted(set(self.children()) - children),
                "files": sorted(self._listing() - files)}

    @staticmethod
    def children() -> list[int]:
        """Live child processes of this process (compilers have finished by now)."""
        me, found = str(os.getpid()), []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[1] == me and fields[0] not in ("Z", "X"):
                found.append(int(proc.name))
        return found

    def _listing(self) -> set[str]:
        found: set[str] = set()
        for root, _, files in os.walk(self._workdir):
            found.update(os.path.join(root, f) for f in files)
        return found


def output_problem(value: Any, position: int) -> str | None:
    """Why an output cannot be trusted as a finished plain tensor, or None."""
    if type(value) is not torch.Tensor:
        return f"output {position} is {type(value).__module__}.{type(value).__name__}"
    if value.device.type == "meta" or value.is_sparse:
        return f"output {position} has no dense storage ({value.layout}, {value.device})"
    try:
        value.untyped_storage()
    except (RuntimeError, NotImplementedError) as exc:
        return f"output {position} has no real storage: {exc}"
    return None


def poison_allocator(device: str, headroom: int = 0) -> None:
    """Fill every free block the caching allocator holds with NaN bytes.

    The next allocation of a kernel that leaves part of its output unwritten
    then shows NaN there, whatever an earlier call (its own, or the freed copy
    of a correct answer) left in that memory. Each free block is claimed at its
    exact size, which the allocator serves from that same block.

    `headroom` bytes more are claimed, poisoned and freed too (at most half
    the device's free memory): a call that needs more than the cache holds
    would otherwise get fresh pages from the driver, which are zeros, and an
    unwritten output of zeros matches a task whose answer is all zeros
    (KernelBench level-2 9's ReLU of values below zero; its knockout with the
    candidate's kernels off once passed as the answer at a larger size).
    """
    if device != "cuda":
        return
    claimed = []
    if headroom > 0:  # first: the room claimed last time is free again and serves it
        free, _ = torch.cuda.mem_get_info()
        size = min(headroom, free // 2)
        if size > 0:
            claimed.append(torch.empty(size, dtype=torch.uint8, device=device))
    # The allocator serves a stream from its own blocks only: those of other
    # streams cannot be claimed here (a claim would take a fresh segment each
    # time), nor handed to this stream's next allocation.
    stream = torch.cuda.current_stream().cuda_stream
    for segment in torch.cuda.memory_snapshot():
        if segment.get("stream", stream) != stream:
            continue
        for block in segment.get("blocks", []):
            if block.get("state") == "inactive" and block.get("size", 0) > 0:
                claimed.append(torch.empty(block["size"], dtype=torch.uint8, device=device))
    for tensor in claimed:
        tensor.fill_(0xFF)  # all-ones bytes are NaN in fp32, fp16 and bf16
    del claimed
    # Done before the next call starts: a kernel the call launches on a stream
    # of its own does not wait for this stream's fills, and one still running
    # would overwrite its output with NaN (a fresh H100: a side stream's right
    # answer read back all NaN at another size).
    torch.cuda.current_stream().synchronize()


class KernelSwitch:
    """Disables the candidate's own Triton launches and CUDA kernels on demand.

    If an output still matches the reference with the candidate's kernels off,
    those kernels did not compute it.
    """

    def __init__(self) -> None:
        self.enabled = True
        self.cuda_setters: list[Any] = []
        self.launches = 0
        self._runs: dict[Any, tuple[Any, Any]] = {}  # class -> (its own run, the switch's)
        self._patch_triton()

    def set(self, enabled: bool) -> None:
        self.enabled = enabled
        for setter in self.cuda_setters:
            setter(0 if enabled else 1)

    def _patch_triton(self) -> None:
        try:
            from triton.runtime import interpreter, jit
        except ImportError:
            return
        switch = self
        for cls in (jit.JITFunction, interpreter.InterpretedFunction):
            original = cls.run

            def run(self, *args, __original=original, **kwargs):
                if not switch.enabled:
                    return None
                switch.launches += 1  # launches that ran, with the kernels on
                return __original(self, *args, **kwargs)

            cls.run = run
            switch._runs[cls] = (original, run)

    @contextlib.contextmanager
    def unhooked(self) -> Iterator[None]:
        """Triton's own launch path while inside: timed calls pass through no hook.

        Launches made inside are neither counted nor switched off.
        """
        for cls, (original, _) in self._runs.items():
            cls.run = original
        try:
            yield
        finally:
            for cls, (_, hooked) in self._runs.items():
                cls.run = hooked
