"""The [memory] settings: whether runs recall and record, where the store lives, how much
a prompt may carry."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kernelevo.cache_dir import default_cache_dir
from kernelevo.schema import AT_LEAST_ONE, NON_NEGATIVE, Annotated, Bound, check_fields

# Read at call time: the store's default path (tests point it at a temporary file).
PATH_VARIABLE = "KERNELEVO_MEMORY_DB"
DB_NAME = "memory.db"


@dataclass(frozen=True)
class MemoryConfig:
    """Recall before a run and record during and after it; `path` "" is the cache folder's."""

    enabled: bool = True
    path: str = ""
    # remembered kernels shown in a rewrite prompt and planted as starting candidates
    kernels: Annotated[int, NON_NEGATIVE] = 2
    # the lessons section's bound, in tokens counted as UTF-8 bytes (a bound for every
    # byte-level BPE tokenizer, as the budget counts input tokens)
    lessons_tokens: Annotated[int, AT_LEAST_ONE] = 600
    # a remembered kernel longer than this (bytes) is neither shown nor planted
    kernel_max_bytes: Annotated[int, AT_LEAST_ONE] = 12_000
    # remembered tasks less similar than this (0 to 1) are not recalled
    min_similarity: Annotated[float, Bound(0, 1)] = 0.3
    similar_tasks: Annotated[int, AT_LEAST_ONE] = 3  # most remembered tasks recalled

    def __post_init__(self) -> None:
        check_fields(self)


def store_path(config: MemoryConfig) -> Path:
    """The memory store's file: the setting, else $KERNELEVO_MEMORY_DB, else the cache's."""
    if config.path:
        return Path(config.path).expanduser()
    return Path(os.environ.get(PATH_VARIABLE) or default_cache_dir() / DB_NAME)
