"""Candidates: a ModelNew source file with its backend and lineage."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kernelevo.cache_dir import cache_key
from kernelevo.errors import CandidateError
from kernelevo.paths import read_text_file

ORIGINS = ("user", "seed", "llm", "repair", "tuner")


@dataclass(frozen=True)
class Backend:
    """A language candidates are written in: one entry of BACKEND_REGISTRY."""

    name: str
    title: str  # as prompts name it
    # Its candidates launch kernels of their own: the search proposes and
    # tunes them, rankings and the memory count them (plain PyTorch does not).
    kernels: bool


# Every module that asks which backends exist reads this: adding one is an
# entry here plus its code (docs/architecture.md, "Where to add").
BACKEND_REGISTRY = (
    Backend("triton", "Triton", kernels=True),
    Backend("cuda", "CUDA", kernels=True),
    Backend("pytorch", "PyTorch", kernels=False),
)
BACKENDS = tuple(backend.name for backend in BACKEND_REGISTRY)
KERNEL_BACKENDS = tuple(backend.name for backend in BACKEND_REGISTRY if backend.kernels)

_TRITON_MARK = re.compile(r"@\s*triton\.(jit|autotune)|from\s+triton\b|import\s+triton\b")
_CUDA_MARK = re.compile(r"\bload_inline\b|__global__")


@dataclass(frozen=True)
class Candidate:
    """One ModelNew implementation; `source` is the whole Python file."""

    source: str
    backend: str
    name: str = "candidate"
    origin: str = "user"
    parent_ids: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise CandidateError(
                f"unknown backend {self.backend!r}: use one of {', '.join(BACKENDS)}"
            )

    @property
    def source_hash(self) -> str:
        """SHA-256 of the source, the key of every cache that depends on it."""
        return cache_key(self.source, digits=None)


def detect_backend(source: str) -> str:
    """Guess the backend from the source: CUDA wins when both marks appear."""
    if _CUDA_MARK.search(source):
        return "cuda"
    if _TRITON_MARK.search(source):
        return "triton"
    return "pytorch"


def load_candidate(path: str | Path, backend: str | None = None,
                   role: str = "candidate") -> Candidate:
    """Read a candidate file; the backend is detected unless given.

    `role` names the file in errors: "candidate", "starting candidate (--seed)".
    """
    file = Path(path)
    source = read_text_file(file, role, "give a .py file that defines class ModelNew",
                            CandidateError)
    if "ModelNew" not in source:
        raise CandidateError(
            f"{file} defines no ModelNew: a candidate must define `class ModelNew(nn.Module)`"
        )
    chosen = backend or detect_backend(source)
    return Candidate(source=source, backend=chosen, name=file.stem)
