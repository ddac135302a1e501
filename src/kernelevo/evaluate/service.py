"""`kernelevo serve`: judges kept warm per GPU, taking jobs over HTTP.

A job is a JudgeJob (protocol.py) as JSON: source text, the task and the
settings; nothing from the network is unpickled or imported by the service
itself, and candidates run only in the judges' sandboxed children. Every
request carries the service's token (`Authorization: Bearer ...`); a service
bound beyond loopback needs a token given by its owner.

Warmth: the forkserver (torch, inductor, Triton imported) starts with the
service; each judge keeps its next oracle and worker started (standby), so a
job for a task seen before finds its reference inputs drawn, its baselines
compiled and a CUDA context made. Judges are kept per task, settings and GPU,
the least recently used closed beyond `max_judges`. Each GPU runs up to
`lanes` jobs at once; their timing phases take turns (gate.py).
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kernelevo import __version__
from kernelevo.errors import ConfigError, KernelEvoError
from kernelevo.evaluate.protocol import JudgeJob, verdicts_to_data
from kernelevo.evaluate.service_client import SERVICE_FILE
from kernelevo.logs import get_logger

log = get_logger(__name__)
_MAX_BODY_BYTES = 16 << 20
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class ServiceSettings:
    """How the service listens and how much it keeps warm."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    gpus: list[int] = field(default_factory=list)  # empty: the CPU
    lanes: int = 1  # jobs at once per GPU
    max_judges: int = 8
    token: str = ""  # empty: a new random one (loopback only)

    def __post_init__(self) -> None:
        if self.lanes < 1 or self.max_judges < 1:
            raise ConfigError("--lanes and --max-judges must be at least 1")
        if self.host not in _LOOPBACK and len(self.token) < 16:
            raise ConfigError(f"serving on {self.host} (beyond this machine) needs a token of "
                              "16 characters or more: set KERNELEVO_SERVICE_TOKEN")
        if not self.token:
            self.token = secrets.token_urlsafe(32)


class JudgePool:
    """Warm judges by (task, settings, GPU), and a limit of jobs at once per GPU."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.slots = settings.gpus or [None]
        self._lanes = {slot: threading.BoundedSemaphore(settings.lanes) for slot in self.slots}
        self._busy = {slot: 0 for slot in self.slots}
        self._idle: OrderedDict[tuple[Any, ...], list[Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.jobs_done = 0

    def judge(self, job: JudgeJob) -> tuple[list[Any], int | None]:
        """Verdicts of one job and the GPU that judged it."""
        task, config, candidates = job.task(), job.config(), job.candidate_list()
        slot = self._choose(job.gpu)
        with self._lanes[slot]:
            key = (job.task_source, job.task_path, json.dumps(job.eval, sort_keys=True), slot)
            judge = self._take(key) or self._new_judge(task, config, slot)
            try:
                verdicts = judge.evaluate_many(candidates, timed=job.timed)
            finally:
                self._give_back(key, judge)
                with self._lock:
                    self._busy[slot] -= 1
                    self.jobs_done += 1
        return verdicts, slot

    def _choose(self, wanted: int | None) -> int | None:
        with self._lock:
            if wanted is not None:
                if wanted not in self._busy:
                    raise ConfigError(f"GPU {wanted} is not served here (served: "
                                      f"{', '.join(str(s) for s in self.slots)})")
                slot = wanted
            else:
                slot = min(self.slots, key=lambda s: self._busy[s])
            self._busy[slot] += 1
            return slot

    def _take(self, key: tuple[Any, ...]) -> Any:
        with self._lock:
            judges = self._idle.get(key)
            if judges:
                self._idle.move_to_end(key)
                return judges.pop()
        return None

    def _give_back(self, key: tuple[Any, ...], judge: Any) -> None:
        evicted = []
        with self._lock:
            self._idle.setdefault(key, []).append(judge)
            self._idle.move_to_end(key)
            while sum(len(v) for v in self._idle.values()) > self.settings.max_judges:
                oldest_key, oldest = next(iter(self._idle.items()))
                evicted.append(oldest.pop(0))
                if not oldest:
                    del self._idle[oldest_key]
        for old in evicted:
            old.close()

    @staticmethod
    def _new_judge(task: Any, config: Any, slot: int | None) -> Any:
        from kernelevo.evaluate.judge import Judge

        return Judge(task, config, gpu_index=slot, standby=True)

    def close(self) -> None:
        with self._lock:
            judges = [j for group in self._idle.values() for j in group]
            self._idle.clear()
        for judge in judges:
            judge.close()

    def health(self) -> dict[str, Any]:
        with self._lock:
            warm = sum(len(v) for v in self._idle.values())
            busy = dict(self._busy)
        return {"ok": True, "version": __version__,
                "device": "cuda" if self.settings.gpus else "cpu",
                "gpus": self.settings.gpus, "lanes": self.settings.lanes,
                "busy": {str(k): v for k, v in busy.items()}, "warm_judges": warm,
                "jobs_done": self.jobs_done}


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        log.debug("service: " + format, *args)

    def do_GET(self) -> None:  # noqa: N802 - the base's name
        if not self._authorised():
            return
        if self.path == "/v1/health":
            self._answer(200, self.server.pool.health())
        else:
            self._answer(404, {"error": f"no such path: {self.path}"})

    def do_POST(self) -> None:  # noqa: N802 - the base's name
        if not self._authorised():
            return
        if self.path != "/v1/judge":
            self._answer(404, {"error": f"no such path: {self.path}"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > _MAX_BODY_BYTES:
            self._answer(413, {"error": f"a job must be 1 to {_MAX_BODY_BYTES} bytes of JSON"})
            return
        started = time.perf_counter()
        try:
            job = JudgeJob.from_dict(json.loads(self.rfile.read(length)))
            verdicts, gpu = self.server.pool.judge(job)
        except ValueError as exc:
            self._answer(400, {"error": f"the job is not JSON: {exc}"})
            return
        except KernelEvoError as exc:
            self._answer(400, {"error": str(exc)})
            return
        except Exception as exc:  # noqa: BLE001 - the client hears of it; the service stays up
            log.exception("service: a job failed")
            self._answer(500, {"error": f"{type(exc).__name__}: {exc}"})
            return
        self._answer(200, {"verdicts": verdicts_to_data(verdicts), "gpu": gpu,
                           "wall_s": round(time.perf_counter() - started, 3)})

    def _authorised(self) -> bool:
        given = self.headers.get("Authorization", "")
        expected = f"Bearer {self.server.settings.token}"
        if hmac.compare_digest(given.encode(), expected.encode()):
            return True
        self._answer(401, {"error": "a valid token is needed (Authorization: Bearer ...)"})
        return False

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, settings: ServiceSettings, pool: JudgePool) -> None:
        super().__init__((settings.host, settings.port), _Handler)
        self.settings, self.pool = settings, pool


class Service:
    """The running service: its HTTP server, its judges and its record file."""

    def __init__(self, settings: ServiceSettings, folder: Path) -> None:
        self.settings = settings
        self.pool = JudgePool(settings)
        self.server = _Server(settings, self.pool)
        host, port = self.server.server_address[:2]
        shown = host if settings.host not in ("0.0.0.0", "::") else "127.0.0.1"
        self.url = f"http://{shown}:{port}"
        self.record = folder / SERVICE_FILE
        folder.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump({"url": self.url, "token": settings.token, "pid": os.getpid()}, file)

    def serve_forever(self) -> None:
        self.server.serve_forever(poll_interval=0.2)

    def stop(self) -> None:
        """Stop taking jobs, close every judge, remove the record (if still ours)."""
        threading.Thread(target=self.server.shutdown, daemon=True).start()
        self.pool.close()
        self.server.server_close()
        try:
            if json.loads(self.record.read_text()).get("pid") == os.getpid():
                self.record.unlink()
        except (OSError, ValueError):
            pass
