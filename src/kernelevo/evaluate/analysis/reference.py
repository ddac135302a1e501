"""What the judge keeps of a task's reference: its outputs and what the oracle learnt of it.

The oracle computes the reference in its own process (child/oracle.py); the
judge imports its outputs and builds one `ReferenceResult` from its last
message (parent/oracle_run.py). Every decision on a candidate reads it: the
worker's state and verdicts (parent/) and the rules of decide_backward.py
(here, in analysis/, which imports neither process's side).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch

from kernelevo.evaluate.analysis import decide

# An output's or a gradient's tolerance: (atol, rtol).
Tolerance = tuple[float, float]


@dataclass(frozen=True)
class OwnError:
    """The reference's own error on one gradient against its float64 gradient, over the
    judged sets (child/oracle_backward.py): what decide_backward's kink rule allows."""

    rel_l2_error: float  # the largest over the judged sets
    mismatch_fraction: float  # the largest share of elements outside the gradient's tolerance
    inexact: bool  # the reference failed the elementwise test itself on some judged set


@dataclass(frozen=True)
class ReferenceGradients:
    """The reference's backward, kept for a task whose gradients are judged."""

    # Kept input set's index -> its gradients, in `names`' order. A stress set
    # whose reference gradients were unsure is left out.
    by_set: Mapping[int, list[torch.Tensor]]
    names: tuple[str, ...]  # `input 0 (x)`, `parameter ln.weight`, ...
    tolerances: tuple[Tolerance, ...]  # one per gradient, in `names`' order
    ops: frozenset[str]  # the compute ops the reference's backward dispatches
    # One per gradient, in `names`' order, None where not measured; () for a float64
    # task, which has no wider reference to be measured against.
    own_errors: tuple[OwnError | None, ...] = ()
    own_unmeasured: str = ""  # why the own errors were not measured (its float64 run failed)

    def own_error(self, position: int) -> OwnError | None:
        """The reference's own error on the gradient at `position`, where measured."""
        return self.own_errors[position] if position < len(self.own_errors) else None


@dataclass(frozen=True)
class ReferenceResult:
    """The reference's outputs on the kept input sets and what the oracle learnt of it."""

    outputs: tuple[list[torch.Tensor], ...]  # per kept input set, on the compare device
    seeds: tuple[int, ...]  # per kept input set: the seed its inputs are made from
    variants: tuple[float | None, ...]  # per kept set: its stress scale, None for none
    stress: Mapping[int, str]  # a kept stress set's index -> how it was made
    passthrough: tuple[str, ...]  # trivial answers found by the oracle: inputs handed back
    structure: str  # the outputs' structure, as the worker's are described
    ops: frozenset[str]  # the compute ops the reference's forward dispatches
    flops: int  # floating-point operations of one forward call
    bytes_moved: int  # bytes of one call's inputs, outputs and parameters
    tolerances: tuple[Tolerance, ...]  # one per output position
    backward: ReferenceGradients | None = None  # None: the backward is not judged
    # Parameters and buffers of one value throughout (`ln.weight (all 1)`), as the
    # task builds them: the check cannot tell a kernel that ignores them.
    constants: tuple[str, ...] = ()
    # The trivial answers (zeros, another set's output) that pass the tolerances;
    # None until checked (oracle_run.py, or the judge when that ran out of memory).
    trivial: tuple[str, ...] | None = None
    # The most GPU memory the oracle's allocator held at once, in bytes (0: not on a GPU)
    peak_bytes: int = 0

    def with_trivial_answers(self, device: str) -> ReferenceResult:
        """This reference with its trivial answers checked, comparing on `device`."""
        found = decide.trivial_answers_pass(self.outputs, self.tolerances, device)
        return replace(self, trivial=tuple(found) + self.passthrough)
