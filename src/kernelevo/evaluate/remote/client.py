"""Finding a running evaluation service and judging through it (no torch imported here).

`kernelevo serve` writes where it listens and its token to `service.json` in
the cache folder (mode 0600). `find_service` reads it (or the environment's
KERNELEVO_SERVICE_URL and KERNELEVO_SERVICE_TOKEN) and asks the service
whether it is up; `ServiceJudge` is a JudgeLike that sends each job there.
A command that finds no service judges in its own process.

The file is per user, not per shell: while a `serve` runs, every `eval` and
`compare` of that user judges there (they say so: "judged on the service at
..."). `--local` judges in the command's own process; each verdict from a
service names it in `environment["judge_service"]`.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from kernelevo.candidate import Candidate
from kernelevo.config import EvalConfig
from kernelevo.errors import EnvironmentProblem
from kernelevo.evaluate.protocol import JudgeJob, verdicts_from_data
from kernelevo.evaluate.verdict import Verdict
from kernelevo.task import Task

SERVICE_FILE = "service.json"
SERVICE_KEY = "judge_service"  # the verdict environment's key naming the service
URL_ENV, TOKEN_ENV = "KERNELEVO_SERVICE_URL", "KERNELEVO_SERVICE_TOKEN"
MAX_BODY_BYTES = 16 << 20  # the largest job a service takes
_PROBE_TIMEOUT_S = 1.0


def cache_dir() -> Path:
    root = os.environ.get("KERNELEVO_CACHE_DIR") or Path.home() / ".cache" / "kernelevo"
    return Path(root)


@dataclass(frozen=True)
class ServiceInfo:
    """Where a service listens, its token, and what it said of itself."""

    url: str
    token: str
    health: dict[str, Any]

    @property
    def device(self) -> str:
        return str(self.health.get("device", "cpu"))


def find_service(folder: Path | None = None) -> ServiceInfo | None:
    """The running service, or None when none answers (a stale file is ignored)."""
    url, token = os.environ.get(URL_ENV, ""), os.environ.get(TOKEN_ENV, "")
    if not url:
        path = (folder or cache_dir()) / SERVICE_FILE
        try:
            record = json.loads(path.read_text())
            url, token = str(record["url"]), str(record["token"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
    try:
        health = request(url, token, "GET", "/v1/health", timeout_s=_PROBE_TIMEOUT_S)
    except EnvironmentProblem:
        return None
    return ServiceInfo(url.rstrip("/"), token, health)


def request(url: str, token: str, method: str, path: str, body: Any = None,
            timeout_s: float | None = None) -> dict[str, Any]:
    """One JSON request; any failure is an EnvironmentProblem with the service's words."""
    data = None if body is None else json.dumps(body).encode()
    if data is not None and len(data) > MAX_BODY_BYTES:
        raise EnvironmentProblem(f"the job is {len(data)} bytes, over the evaluation service's "
                                 f"limit of {MAX_BODY_BYTES}: judge it with --local")
    call = urllib.request.Request(url.rstrip("/") + path, data=data, method=method,
                                  headers={"Authorization": f"Bearer {token}",
                                           "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(call, timeout=timeout_s) as response:
            answer = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            said = json.loads(exc.read()).get("error", "")
        except (ValueError, AttributeError):
            said = ""
        raise EnvironmentProblem(f"the evaluation service at {url} answered {exc.code}: "
                                 f"{said or exc.reason}") from None
    except (OSError, ValueError) as exc:  # refused, timed out, not JSON
        raise EnvironmentProblem(f"no evaluation service answered at {url}: {exc}") from None
    if not isinstance(answer, dict):
        raise EnvironmentProblem(f"the evaluation service at {url} answered no JSON object")
    return answer


class ServiceJudge:
    """A JudgeLike that judges on a running service; the service keeps judges warm."""

    def __init__(self, service: ServiceInfo, task: Task, config: EvalConfig | None = None,
                 progress: Callable[[str], None] | None = None,
                 gpu: int | None = None) -> None:
        self.service, self.task, self.config = service, task, config or EvalConfig()
        self.device = service.device
        self.gpu = gpu
        self.progress = progress or (lambda phase: None)

    def evaluate(self, candidate: Candidate) -> Verdict:
        return self.evaluate_many([candidate])[0]

    def evaluate_many(self, candidates: list[Candidate], timed: bool = True) -> list[Verdict]:
        job = JudgeJob.of(self.task, candidates, self.config, timed, self.gpu)
        self.progress(f"judging on the evaluation service at {self.service.url}")
        answer = request(self.service.url, self.service.token, "POST", "/v1/judge",
                         job.to_dict())
        verdicts = verdicts_from_data(answer.get("verdicts"), len(candidates))
        # Where it was judged travels with the verdict: --json and stored runs show it too.
        return [replace(verdict, environment={**verdict.environment,
                                              SERVICE_KEY: self.service.url})
                for verdict in verdicts]

    def prebuild(self, candidate: Candidate) -> float | None:
        return None  # the service builds CUDA candidates ahead itself

    def close(self) -> None:
        pass
