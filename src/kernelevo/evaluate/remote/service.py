"""`kernelevo serve`: judges kept warm per GPU, taking jobs over HTTP.

A job is a JudgeJob (protocol.py) as JSON: source text, the task and the
settings; nothing from the network is unpickled or imported by the service
itself, and candidates run only in the judges' sandboxed children. Every
request carries the service's token (`Authorization: Bearer ...`); a service
bound beyond loopback needs a token given by its owner.

The service joins two parts: its warm judges and their lanes (judge_pool.py)
and its HTTP side, with read deadlines, body limits and malformed requests
(service_http.py). Stopping kills every job's children before the judges close.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from kernelevo.evaluate.sandbox import jobs as sandbox
from kernelevo.evaluate.remote.judge_pool import (  # noqa: F401 (re-exported)
    LOOPBACK,
    JobCancelled,
    JobControl,
    JudgePool,
    ServiceSettings,
)
from kernelevo.evaluate.remote.client import SERVICE_FILE
from kernelevo.evaluate.remote.http_server import ServiceServer
from kernelevo.logs import get_logger

log = get_logger(__name__)
_CLOSE_WAIT_S = 5.0  # how long stopping waits for the judges to close
_ANSWER_WAIT_S = 2.0  # and for the jobs it stopped to be answered 503


class Service:
    """The running service: its HTTP server, its judges and its record file."""

    def __init__(self, settings: ServiceSettings, folder: Path) -> None:
        self.settings = settings
        self.pool = JudgePool(settings)
        self.server = ServiceServer(settings, self.pool)
        host, port = self.server.server_address[:2]
        assert isinstance(host, str)  # an inet socket's bound name; the stub allows bytes too
        shown = host if settings.host not in ("0.0.0.0", "::") else "127.0.0.1"
        self.url = f"http://{shown}:{port}"
        self.record = folder / SERVICE_FILE
        folder.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump({"url": self.url, "token": settings.token, "pid": os.getpid()}, file)

    def serve_forever(self) -> None:
        self.server.serve_forever(poll_interval=0.2)

    def stop(self, exiting: bool = False) -> None:
        """Stop taking jobs, kill every job's children, close the judges, remove the record.

        Bounded whatever the jobs do: their children are killed and their waits
        give up. `exiting`: the process ends next, so new jobs stay refused.
        """
        sandbox.stop_all_jobs()
        threading.Thread(target=self.server.shutdown, daemon=True).start()
        if not self.pool.close_within(_CLOSE_WAIT_S):
            log.warning("service: judges still closing after %.0f s; stopping anyway",
                        _CLOSE_WAIT_S)
        self.server.jobs.wait_idle(_ANSWER_WAIT_S)
        self.server.server_close()
        if not exiting:
            sandbox.allow_jobs()
        try:
            if json.loads(self.record.read_text()).get("pid") == os.getpid():
                self.record.unlink()
        except (OSError, ValueError):
            pass
