"""Judging a job that arrived as data: what a cluster worker (or a service) runs.

    judge_job(job_dict)   -> {"verdicts": [...], "host": ..., "pid": ...}
                          or {"error": {"kind": ..., "message": ...}, "host": ..., "pid": ...}
    describe_host()       -> what this host offers: versions, job version, GPUs

The job is `JudgeJob.to_dict()`: strings and numbers only. The one piece of
code in it is the candidate's source, which the judge runs sandboxed as it
always does. A judge is kept per task, settings, GPU and thread in this
process, so a worker imports torch and sets up its caches once per task, not
once per candidate; a thread never shares its judge with another.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import OrderedDict
from typing import Any

from kernelevo.errors import ConfigError, KernelEvoError, TaskError
from kernelevo.evaluate.protocol import JOB_VERSION, JudgeJob, verdicts_to_data

# Judges kept per process; a worker serving many tasks forgets the oldest.
KEPT_JUDGES = 8
# The errors a worker answers as data; the client raises them again by name.
ANSWERED_ERRORS: dict[str, type[KernelEvoError]] = {
    "TaskError": TaskError, "ConfigError": ConfigError, "KernelEvoError": KernelEvoError}

_judges: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_judges_lock = threading.Lock()


def judge_job(data: dict[str, Any]) -> dict[str, Any]:
    """The verdicts of one job, or the error that kept it from being judged, as JSON data.

    A task or settings problem is an answer, not an exception, so the cluster
    does not retry what would fail the same way on any worker.
    """
    try:
        job = JudgeJob.from_dict(data)
        judge = _judge_for(job)
        verdicts = judge.evaluate_many(job.candidate_list(), timed=job.timed)
    except KernelEvoError as exc:
        kind = type(exc).__name__ if type(exc).__name__ in ANSWERED_ERRORS else "KernelEvoError"
        return {"error": {"kind": kind, "message": str(exc)}, **_identity()}
    return {"verdicts": verdicts_to_data(verdicts), **_identity()}


def describe_host() -> dict[str, Any]:
    """What this process can judge with: versions, the job version it reads, GPUs."""
    import multiprocessing

    import torch

    from kernelevo.version import __version__

    return {**_identity(), "kernelevo": __version__, "job_version": JOB_VERSION,
            "torch": torch.__version__,
            "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            # A daemonic process may not start children, and the judge must.
            "daemonic": multiprocessing.current_process().daemon}


def error_from_answer(answer: dict[str, Any]) -> KernelEvoError:
    """The exception a worker answered as data, as its own class."""
    error = answer.get("error") or {}
    kind = ANSWERED_ERRORS.get(str(error.get("kind")), KernelEvoError)
    return kind(f"{error.get('message', 'the worker gave no reason')} "
                f"(judged on {answer.get('host', 'an unknown host')})")


def _identity() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _judge_for(job: JudgeJob) -> Any:
    """This thread's judge for the job's task, settings and GPU, made on first use."""
    key = (job.task_name, job.task_source, job.task_path,
           job.eval, job.gpu, threading.get_ident())
    with _judges_lock:
        judge = _judges.get(key)
        if judge is not None:
            _judges.move_to_end(key)
            return judge
    from kernelevo.evaluate.parent.judge import Judge

    judge = Judge(job.task(), job.config(), gpu_index=job.gpu)
    with _judges_lock:
        _judges[key] = judge
        while len(_judges) > KEPT_JUDGES:
            _judges.popitem(last=False)
    return judge
