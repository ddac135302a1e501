"""Judging on a Dask cluster: jobs go as data to workers on other hosts.

    connection = connect("tcp://scheduler:8786", timeout_s=30, device="auto")
    judges = [ClusterJudge(connection, task, config) for _ in range(connection.slots)]

A job is `JudgeJob.to_dict()`: the candidate's and the task's source and the
settings, as plain values. Dask pickles `judge_on_worker` by reference (its
module and name), so a worker runs only KernelEvo's own code, from its own
install, on that data. Each worker judges with a local `Judge`, sandbox and
all, on the one GPU it was started with (docs/cluster.md).

A worker that dies mid-job (killed, out of memory, host lost) is the
scheduler's to handle: it runs the job again on another worker, up to its
`distributed.scheduler.allowed-failures` setting (3 unless changed); past
that the job's candidates get `crashed` verdicts that say so, never silence.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import CancelledError
from dataclasses import replace
from typing import Any

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig
from kernelevo.errors import ConfigError, EnvironmentProblem
from kernelevo.evaluate.sandbox import jobs as sandbox
from kernelevo.evaluate.remote.address import resolve_host
from kernelevo.evaluate.protocol import JOB_VERSION, JudgeJob, verdicts_from_data
from kernelevo.evaluate.remote.job import describe_host, error_from_answer, judge_job
from kernelevo.evaluate.verdict import Verdict, verdict_for
from kernelevo.logs import get_logger
from kernelevo.task import Task

log = get_logger(__name__)

GPU_RESOURCE = "GPU"  # the resource name workers advertise, one unit per GPU
POLL_S = 0.5  # how often a waiting judge looks whether the run is stopping
WORKER_CHECK_S = 10.0  # how often it looks whether any worker can take its job
START_WORKER = ("CUDA_VISIBLE_DEVICES=0 dask worker {address} --nworkers 1 --nthreads 1 "
                "--resources GPU=1 (one per GPU; docs/cluster.md)")


def judge_on_worker(data: dict[str, Any]) -> dict[str, Any]:
    """`remote.judge_job` on a Dask worker; the answer names the worker that judged."""
    from distributed import get_worker

    answer = judge_job(data)
    try:
        answer["worker"] = str(get_worker().name)
    except ValueError:  # called outside a worker (a test calling it directly)
        answer["worker"] = ""
    return answer


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise EnvironmentProblem("judging on a cluster needs Dask distributed, an optional "
                                 "extra: pip install 'kernelevo[cluster]'") from None
    return distributed


class ClusterConnection:
    """One Dask client that every judge of a run shares, and what its workers offer."""

    def __init__(self, client: Any, address: str, device: str, use_gpu_resource: bool,
                 slots: int) -> None:
        self.client, self.address = client, address
        self.device = device  # "cuda" or "cpu": where the workers run candidates
        self.use_gpu_resource = use_gpu_resource  # each job takes one GPU of a worker
        self.slots = slots  # jobs the workers can run at once when the run starts
        self.closed = False

    def submit(self, job: JudgeJob, retries: int) -> Any:
        resources = {GPU_RESOURCE: 1} if self.use_gpu_resource else None
        return self.client.submit(judge_on_worker, job.to_dict(), pure=False, retries=retries,
                                  resources=resources, key=f"kernelevo-judge-{uuid.uuid4().hex}")

    def workers_for_jobs(self) -> int:
        """Workers that could take a job now (with a GPU resource where jobs need one)."""
        workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
        if not self.use_gpu_resource:
            return len(workers)
        return sum(1 for info in workers.values()
                   if info.get("resources", {}).get(GPU_RESOURCE, 0) >= 1)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.client.close()


def connect(address: str, timeout_s: float = 30.0, device: str = "auto",
            slots: int = 0) -> ClusterConnection:
    """A connection to the scheduler at `address` once a worker has joined; ConfigError if not.

    `device` is the run's EvalConfig.device; `slots` (0: one per worker GPU,
    or per worker thread on a cluster without GPUs) is how many jobs the run
    keeps in flight.
    """
    resolve_host(address)  # a bad name fails now, not after the timeout
    distributed = _distributed()
    try:
        client = distributed.Client(address, timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError, distributed.TimeoutError, ValueError) as exc:
        raise ConfigError(f"cannot reach the Dask scheduler at {address} within "
                          f"{timeout_s:g} s ({exc}): start one with `dask scheduler` and give "
                          f"its address, e.g. tcp://HOST:8786") from None
    try:
        try:
            client.wait_for_workers(1, timeout=timeout_s)
        except (TimeoutError, distributed.TimeoutError):
            raise ConfigError(f"no worker joined the Dask scheduler at {address} within "
                              f"{timeout_s:g} s: start one with "
                              f"{START_WORKER.format(address=address)}") from None
        hosts = _check_workers(client, address)
        return _connection(client, address, device, slots, hosts)
    except BaseException:
        client.close()
        raise


def _check_workers(client: Any, address: str) -> dict[str, dict[str, Any]]:
    """Every worker's description; ConfigError for one that cannot judge at all."""
    hosts = client.run(describe_host, on_error="return")
    for worker, host in hosts.items():
        if isinstance(host, BaseException):
            raise ConfigError(f"worker {worker} of {address} cannot run KernelEvo's judge "
                              f"({type(host).__name__}: {host}): install kernelevo[cluster] "
                              "on every worker host, the same version as here")
        if host.get("job_version") != JOB_VERSION:
            raise ConfigError(f"worker {worker} reads judge jobs of version "
                              f"{host.get('job_version')}, this KernelEvo writes {JOB_VERSION}: "
                              "install the same KernelEvo on the workers as here")
        if host.get("daemonic"):
            raise ConfigError(f"worker {worker} runs as a daemonic process, which may not "
                              "start the judge's sandboxed children: start workers with "
                              "DASK_DISTRIBUTED__WORKER__DAEMON=False or --no-nanny")
    return hosts


def _connection(client: Any, address: str, device: str, slots: int,
                hosts: dict[str, dict[str, Any]]) -> ClusterConnection:
    """Where jobs run (GPU or CPU) and how many at once, from what the workers offer."""
    workers = client.scheduler_info(n_workers=-1).get("workers", {})
    gpu_units = {worker: int(info.get("resources", {}).get(GPU_RESOURCE, 0))
                 for worker, info in workers.items()}
    seen_gpus = sum(int(host.get("gpus", 0)) for host in hosts.values())
    if device == "auto":
        device = "cuda" if any(gpu_units.values()) or seen_gpus else "cpu"
    if device == "cuda" and not seen_gpus:
        raise ConfigError(f"--device cuda, but no worker of {address} sees a GPU: start "
                          f"workers on GPU hosts with {START_WORKER.format(address=address)}")
    use_gpu_resource = device == "cuda" and any(gpu_units.values())
    if device == "cuda" and not use_gpu_resource:
        log.warning("no worker of %s offers the %s resource: jobs are not held to one per "
                    "GPU; start workers with --resources GPU=1", address, GPU_RESOURCE)
    if not slots:
        slots = (sum(gpu_units.values()) if use_gpu_resource else
                 sum(int(info.get("nthreads", 1)) for info in workers.values()))
    log.info("cluster %s: %d worker(s), judging on %s, %d job(s) at once", address,
             len(workers), device, slots)
    return ClusterConnection(client, address, device, use_gpu_resource, max(1, slots))


class ClusterJudge:
    """A JudgeLike whose jobs run on the cluster's workers, one job at a time."""

    def __init__(self, connection: ClusterConnection, task: Task,
                 config: EvalConfig | None = None, retries: int = 1) -> None:
        self.connection, self.task = connection, task
        self.config = config or EvalConfig()
        self.device = connection.device
        self.retries = retries  # for errors a worker raised, not for workers that died

    def evaluate(self, candidate: Candidate) -> Verdict:
        return self.evaluate_many([candidate])[0]

    def evaluate_many(self, candidates: list[Candidate], timed: bool = True) -> list[Verdict]:
        """Verdicts of several candidates judged together on one worker, in their order."""
        job = JudgeJob.of(self.task, candidates, self.config, timed)
        future = self.connection.submit(job, self.retries)
        try:
            answer = self._wait(future)
        except CancelledError as exc:
            return [self._lost(f"the scheduler dropped the job ({exc})") for _ in candidates]
        except _distributed().KilledWorker as exc:
            return [self._lost(f"every worker that took this job died while judging it, so "
                               f"the scheduler gave up (raise its "
                               f"distributed.scheduler.allowed-failures to try more): {exc}")
                    for _ in candidates]
        if "error" in answer:
            raise error_from_answer(answer)
        # Who judged, and the job's key, by which the scheduler's logs know it.
        judged_by = {"judge_host": str(answer.get("host", "")),
                     "judge_worker": str(answer.get("worker", "")),
                     "cluster_job": str(future.key)}
        return [replace(verdict, environment={**verdict.environment, **judged_by})
                for verdict in verdicts_from_data(answer.get("verdicts"), len(candidates))]

    def prebuild(self, candidate: Candidate) -> float | None:
        """None: the worker builds. Its build cache is on its own host, so a build made
        here or on another worker would not be the one the judging worker finds."""
        return None

    def close(self) -> None:
        """Close the connection the run's judges share (once, whichever judge asks)."""
        self.connection.close()

    def _wait(self, future: Any) -> dict[str, Any]:
        """The job's answer; while no worker can take it, say so every WORKER_CHECK_S."""
        timeouts = (TimeoutError, _distributed().TimeoutError)  # apart on Python 3.10
        checked = time.monotonic()
        warned = False
        while True:
            if sandbox.stopping():
                future.cancel()
                raise sandbox.JobsStopped("the run is stopping: its cluster job was cancelled")
            try:
                return future.result(timeout=POLL_S)
            except timeouts:
                pass
            if time.monotonic() - checked < WORKER_CHECK_S:
                continue
            checked = time.monotonic()
            idle = self.connection.workers_for_jobs() == 0
            if idle and not warned:
                need = f" with {GPU_RESOURCE}=1" if self.connection.use_gpu_resource else ""
                log.warning("no worker%s is connected to %s: the job waits for one; start "
                            "one with %s", need, self.connection.address,
                            START_WORKER.format(address=self.connection.address))
            warned = idle

    def _lost(self, why: str) -> Verdict:
        return verdict_for("exited_early", f"the cluster at {self.connection.address} lost "
                           f"this job: {why}", isolation="Dask cluster worker")
