"""The search's own settings (the judge has its own EvalConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from kernelevo.candidate import KERNEL_BACKENDS
from kernelevo.evaluate.remote.address import check_address
from kernelevo.schema import (AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Annotated, Bound, OneOf,
                              check_fields)

# Each island is an archive of its own; beyond this, no budget fills them.
MAX_ISLANDS = 100


@dataclass(frozen=True)
class SearchConfig:
    """Settings of the search itself (the judge has its own EvalConfig)."""

    # The search writes kernels: in a backend of the registry that launches its own.
    backend: Annotated[str, OneOf(KERNEL_BACKENDS)] = "triton"
    islands: Annotated[int, Bound(1, MAX_ISLANDS)] = 3
    migration_interval: Annotated[int, NON_NEGATIVE] = 10  # 0: islands never exchange
    inspirations: Annotated[int, NON_NEGATIVE] = 2
    llm_in_flight: Annotated[int, AT_LEAST_ONE] = 8
    max_output_tokens: Annotated[int, AT_LEAST_ONE] = 8192
    repair_tries: Annotated[int, NON_NEGATIVE] = 2
    tuner_variants: Annotated[int, NON_NEGATIVE] = 3
    diff_probability: Annotated[float, Bound(0, 1)] = 0.5
    seed: int = 0
    # proposals wait while this many per worker await judging
    queued_per_worker: Annotated[int, AT_LEAST_ONE] = 2
    build_workers: Annotated[int, AT_LEAST_ONE] = 2  # CPU processes compiling CUDA candidates
    # Candidates judged at once per GPU: checks overlap, timing takes turns (gate.py).
    lanes: Annotated[int, AT_LEAST_ONE] = 1
    # A Dask scheduler's address (tcp://HOST:8786): judge on its workers, not local GPUs.
    cluster: str = ""
    cluster_slots: Annotated[int, NON_NEGATIVE] = 0  # jobs in flight; 0: one per worker GPU
    cluster_timeout_s: Annotated[float, POSITIVE] = 30.0  # to reach it and see a worker
    # End the search once a kernel reaches this fraction of its roofline bound; 0: never.
    stop_at_roofline: Annotated[float, Bound(0, 1)] = 0.0

    def __post_init__(self) -> None:
        check_fields(self)
        if self.cluster:
            check_address(self.cluster)
