"""Whether a candidate did its own work on every call of a loop: its launches, counted apart.

The timed calls pass through no hook (the candidate's Triton launches go
straight to Triton, as in a plain process), so its launches are counted in a
few untimed calls after the timing: one call, then a loop of calls on the same
unchanged inputs, as the call measure's loops are. An output cached on those
inputs makes every call of the loop after the first free, and shows as fewer
launches per call in the loop than in the single call.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

LaunchCount = Callable[[], int]  # own kernel launches so far in this process

LOOP_CALLS = 10  # calls of the counted loop


def count_own_launches(calls: dict[str, Callable[[], Any]], load: Callable[[], None],
                       launch_count: LaunchCount) -> dict[str, dict[str, float]]:
    """Own launches of one call ("gpu") and per call of a loop ("call"), by candidate.

    Only contestants named `candidate_*` are counted: the baselines launch no
    kernels of a candidate's. `load()` makes one input set current.
    """
    counts: dict[str, dict[str, float]] = {"gpu": {}, "call": {}}
    for name, call in calls.items():
        if not name.startswith("candidate_"):
            continue
        load()
        before = launch_count()
        call()
        counts["gpu"][name] = launch_count() - before
        before = launch_count()
        for _ in range(LOOP_CALLS):
            call()
        counts["call"][name] = (launch_count() - before) / LOOP_CALLS
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return counts


def skipped_work(launches: dict[str, dict[str, float]], name: str) -> str | None:
    """Why a contestant's loop of calls did less of its own work than single calls, if it did.

    Inputs stay unchanged through a loop of calls (the call measure), so an
    output cached on them would make every call after the first free.
    """
    single = launches.get("gpu", {}).get(name, 0)
    looped = launches.get("call", {}).get(name, single)
    if single > 0 and looped < single:
        return (f"{looped:.2f} own kernel launches per call in a loop of calls against "
                f"{single:g} in single calls: work skipped on repeated calls")
    return None
