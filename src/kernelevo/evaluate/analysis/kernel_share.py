"""The own-kernel share of a profile: how much GPU time the candidate's own kernels took.

Pure functions of a profile's kernels, so they are tested on CPU. A share
is a plain dict (it travels in the worker's `Timing` message): `own_share`,
`own_us`, `total_us` and the busiest `kernels`, each `{"us", "own"}` by name.
For a task whose backward is judged, the worker also profiles one training
step (`child/share_training.py`): its forward with grad and its backward run
in annotated spans, and `training_share` splits the trace's kernels by span.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from kernelevo.evaluate.analysis.profile import TraceEvent

# The spans of a profiled training step: forward with grad, then the backward of the loss.
TRAIN_FORWARD = "kernelevo::train_forward"
TRAIN_BACKWARD = "kernelevo::train_backward"
# Trace categories counted as GPU time, as the forward's key_averages counts them
# (copies and sets too: a share of the step's GPU time, not only of its kernels).
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# Kernels kept in a share, busiest first; the rest count in its totals only.
KEPT_KERNELS = 20
_NAME_CHARS = 120


def is_own(name: str, names: Iterable[str]) -> bool:
    """Whether a kernel's name is one of the candidate's (a whole word of it, not a part)."""
    return any(re.search(rf"\b{re.escape(own)}\b", name) for own in names if own)


def kernel_share(kernels: Iterable[tuple[str, float, bool]]) -> dict[str, Any]:
    """The share of (name, us, own) kernels, summed by name, the busiest kept."""
    by_name: dict[str, dict[str, Any]] = {}
    for name, us, own in kernels:
        if us <= 0:
            continue
        entry = by_name.setdefault(name[:_NAME_CHARS], {"us": 0.0, "own": False})
        entry["us"] += us
        entry["own"] = entry["own"] or own
    total_us = sum(entry["us"] for entry in by_name.values())
    own_us = sum(entry["us"] for entry in by_name.values() if entry["own"])
    busiest = sorted(by_name.items(), key=lambda item: -item[1]["us"])[:KEPT_KERNELS]
    return {"own_share": own_us / total_us if total_us else 0.0, "own_us": own_us,
            "total_us": total_us, "kernels": dict(busiest)}


def training_share(events: Iterable[TraceEvent], names: Iterable[str],
                   categories: tuple[str, ...] = GPU_CATEGORIES) -> dict[str, Any]:
    """The share of the training step's spans, with the backward's own under `backward`.

    A kernel belongs to the span its start falls in: each span ends with a
    device synchronisation, so the forward's kernels have all run before the
    backward's span begins, though autograd launches the backward's kernels
    from a thread of its own. Kernels outside both spans (a warm step) are
    left out.
    """
    events, names = list(events), tuple(names)
    spans = {label: [(e.start_us, e.start_us + e.duration_us) for e in events
                     if e.name == label and e.category != "gpu_user_annotation"]
             for label in (TRAIN_FORWARD, TRAIN_BACKWARD)}
    kernels: dict[str, list[tuple[str, float, bool]]] = {TRAIN_FORWARD: [], TRAIN_BACKWARD: []}
    for event in events:
        if event.category not in categories:
            continue
        for label, windows in spans.items():
            if any(start <= event.start_us < end for start, end in windows):
                kernels[label].append((event.name, event.duration_us,
                                       is_own(event.name, names)))
                break
    share = kernel_share(kernels[TRAIN_FORWARD] + kernels[TRAIN_BACKWARD])
    share["backward"] = kernel_share(kernels[TRAIN_BACKWARD])
    share["steps"] = len(spans[TRAIN_BACKWARD])
    return share


def recorded_kernels(share: dict[str, Any]) -> list[str]:
    """Names of real kernels in a profile (memory copies and sets are not kernels)."""
    return [name for name in share.get("kernels", {})
            if not name.startswith(("Memcpy", "Memset"))]


def unrecorded_training_note(training: dict[str, Any]) -> str | None:
    """Why the training step's profile proves nothing about its backward, if it does not.

    The step could not be profiled; its backward recorded no kernel at all;
    or none of the Triton launches the launch switch counted during the
    profiled backward: the profiler lost records, which says nothing either
    way. As the forward's, such a profile is noted, never a failure.
    """
    if training.get("error"):
        return f"training step not profiled ({training['error']}): its own kernel share unknown"
    steps = training.get("profiled_steps", 1)
    backward = training.get("backward", {})
    if not recorded_kernels(backward):
        return (f"the profiler recorded no kernel in the backward of {steps} profiled training "
                "step(s): the training step's own kernel share unknown")
    if backward.get("own_us", 0) <= 0 and training.get("launched", 0) > 0:
        return (f"the profiler recorded none of the candidate's {training['launched']} Triton "
                f"launch(es) during the backward of {steps} profiled training step(s): the "
                "training step's own kernel share unknown")
    return None


def no_own_backward(training: dict[str, Any]) -> str | None:
    """Why the profiled backward is not the candidate's own kernels, if it is not.

    Only for a profile that stands (`unrecorded_training_note` None): its
    backward ran kernels, none of them the candidate's, and no launch of
    the candidate's was counted there. The decision on the gradients
    catches a Triton backward with no launch of its own and, with the
    candidate's kernels switched off, one whose gradients do not change;
    this catches what those cannot see: a backward of PyTorch's ops beside
    a CUDA source the kernel switch cannot reach (no launch count, no
    knockout).
    """
    backward = training.get("backward", {})
    if training.get("error") or backward.get("own_us", 0) > 0 or not recorded_kernels(backward):
        return None
    seen = ", ".join(name[:60] for name in recorded_kernels(backward)[:5])
    return (f"the profiler saw none of the candidate's kernels run during the backward of "
            f"{training.get('profiled_steps', 1)} profiled training step(s) (forward with grad, "
            f"then the backward of the projected loss; backward kernels seen: {seen}): "
            "PyTorch computes the gradients; launch your own kernels from the "
            "autograd.Function's backward")
