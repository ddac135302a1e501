"""A task's baselines timed for the store in the worker's warm-up, or found too quick to store.

Runs before any candidate loads in the worker's process: the times taken
here are the store's only source (evaluate/parent/baseline_store.py).
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

import torch

from kernelevo.evaluate.analysis.baseline_drift import STORED_MIN_MS
from kernelevo.evaluate.child import host_speed
from kernelevo.evaluate.child.baselines import Baselines
from kernelevo.evaluate.child.timing import time_contestants
from kernelevo.evaluate.shared import inputs as task_inputs
from kernelevo.evaluate.shared.cores import on_timing_core, timing_core, visible_gpu_ordinal
from kernelevo.evaluate.shared.messages import (BaselineTimes, Progress, Sender, StoredBaselines,
                                                WorkerJob)
from kernelevo.evaluate.shared.replies import BaselinesReply

# Input sets the baselines are timed on for the store: the task's own distribution.
_STORE_SETS = 2


def stored_or_timed(task: Any, job: WorkerJob, baselines: Baselines,
                    channel: Sender, waits: dict[str, float] | None = None) -> BaselinesReply:
    """The task's stored baseline times, or, none stored yet, theirs timed now.

    Runs in the warm-up, before any candidate is loaded in this process: the
    times taken here are the store's only source (baseline_store.py). The
    judge holds the GPU for this worker alone while it times them. Baselines
    surely too quick for stored times to stand in (`surely_short`) are
    neither looked up nor timed here: every candidate times them beside it.
    `waits` gets the seconds spent waiting for the GPU, alone and then shared
    again (`store_gate_wait`), apart from the timing's own.
    """
    waits = {} if waits is None else waits
    if not baselines.contestants:
        return BaselinesReply()
    # Timed as the candidates' timing phase times them (worker_timing.py), not under the
    # warm-up's fp32 convolutions: stored so, a convolution's baselines read 1.9-3.6x the
    # times the drift probe found beside the candidate, on five level-2 tasks of a suite on
    # an H100, and each was timed again (bench/RESULTS.md).
    task_inputs.set_user_backend(job.timing.conv_tf32)
    try:
        return _stored_or_timed(task, job, baselines, channel, waits)
    finally:
        task_inputs.set_user_backend(conv_tf32=False)  # the warm-up's, as the checks run


def _stored_or_timed(task: Any, job: WorkerJob, baselines: Baselines, channel: Sender,
                     waits: dict[str, float]) -> BaselinesReply:
    first = next(iter(baselines.contestants.values()))  # the probe of stored times
    warm = task_inputs.make_inputs(task, 0, job.device, getattr(torch, job.dtype))
    with torch.no_grad():
        short = surely_short(lambda: first(*warm), lambda: task_inputs.synchronize(job.device))
    del warm
    if short:  # timed beside every candidate: a stored time would never be read
        return BaselinesReply()
    asked = time.perf_counter()
    reply = BaselinesReply.from_json(channel.ask(StoredBaselines()))
    waits["store_gate_wait"] = time.perf_counter() - asked  # the GPU held alone, when timed
    if not reply.time_them:
        return reply
    channel.send(Progress("timing baselines"))
    device, dtype = job.device, getattr(torch, job.dtype)
    seeds = random.SystemRandom().sample(range(1, 1 << 30), _STORE_SETS)
    sets = [task_inputs.make_inputs(task, seed, device, dtype) for seed in seeds]
    quiet = host_speed.QuietHost(channel, device == "cuda" and job.timing.hold_other_jobs)
    with torch.no_grad(), on_timing_core(timing_core(visible_gpu_ordinal())):
        run = time_contestants(dict(baselines.contestants), sets, job.timing,
                               lambda *_: None, quiet=quiet)
    del sets
    measures = run.as_json()
    notes = (tuple(run.notes) + tuple(f"baselines: {flag}" for flag in run.flags)
             + tuple(f"baselines: {note}" for note in (quiet.note(),) if note))
    asked = time.perf_counter()
    channel.ask(BaselineTimes(measures, notes))  # the rest of the warm-up: shared again
    waits["store_gate_wait"] += time.perf_counter() - asked
    return BaselinesReply(measures, time.strftime("%Y-%m-%dT%H:%M:%S"), notes)


# A probe baseline whose lone, synchronised call takes less than this share of
# STORED_MIN_MS is short whatever the host does next (it moved 1.9x within
# seconds on an idle H100 machine; bench/RESULTS.md, "A noisy machine").
SURELY_SHORT_SHARE = 0.5


def surely_short(call: Callable[[], Any], sync: Callable[[], None], calls: int = 5,
                 loop: int = 10) -> bool:
    """Whether the probe baseline's `call` is far quicker than STORED_MIN_MS a call.

    Stored times stand in only for baselines that slow in the call measure
    (`_probe`): timing quicker ones for the store (the GPU held alone) only
    delays the worker. Lone synchronised calls first (erring long); the
    fastest counts, and a second one far too slow ends it (one alone may have
    met other lanes' kernels on the GPU). A fastest lone call within 4x of
    the limit is decided by `loop` calls back to back, synchronised once, as
    the call measure times them. bench/RESULTS.md ("The suite against
    KernelBench's harness") has the warm-ups this spares.
    """
    limit_s = SURELY_SHORT_SHARE * STORED_MIN_MS / 1e3
    call()  # a first call's one-off set-up (handles, plans) is no call's time
    sync()
    fastest, far_too_slow = float("inf"), 0
    for _ in range(calls):
        started = time.perf_counter()
        call()
        sync()
        elapsed = time.perf_counter() - started
        far_too_slow += elapsed > 4 * limit_s
        if far_too_slow == 2:
            return False
        fastest = min(fastest, elapsed)
    if fastest < limit_s:
        return True
    if fastest >= 4 * limit_s:
        return False
    started = time.perf_counter()
    for _ in range(loop):
        call()
    sync()
    return (time.perf_counter() - started) / loop < limit_s
