"""The evaluation service's HTTP side: one request per connection, read in bounded time.

Everything before the token is checked is bounded too: a client has
`read_timeout_s` to send its whole request (a reaper thread shuts the
reading end of a connection past that), a body must declare its length and
stay under MAX_BODY_BYTES, and at most MAX_CONNECTIONS are open at once.
Malformed requests are answered 400 with the field named, never a
traceback. While a job is judged its connection is watched: a client that
leaves has its job cancelled (its processes killed, its lane freed).
"""

from __future__ import annotations

import hmac
import json
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kernelevo.errors import KernelEvoError
from kernelevo.evaluate.parent.gate import GateAbandoned
from kernelevo.evaluate.protocol import JudgeJob, verdicts_to_data
from kernelevo.evaluate.remote.address import bind_error
from kernelevo.evaluate.remote.client import MAX_BODY_BYTES
from kernelevo.evaluate.remote.judge_pool import (JobCancelled, JobControl, JudgePool,
                                                  ServiceSettings)
from kernelevo.evaluate.sandbox import jobs as sandbox
from kernelevo.logs import get_logger

log = get_logger(__name__)
MAX_CONNECTIONS = 64
_WATCH_S = 0.25  # how often a judged job's connection is looked at
_KILL_EVERY_S = 1.0  # a cancelled job's sessions are killed again (a new one may start)
_DRAIN_BYTES, _DRAIN_S = 1 << 20, 1.0  # unread body read away so the answer is not reset


class ReadDeadlines:
    """Each open connection's time to send its request; past it, its reading end is shut."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._due: dict[socket.socket, float] = {}
        self._late: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._reap, name="kernelevo-read-deadlines", daemon=True).start()

    def watch(self, connection: socket.socket) -> None:
        with self._lock:
            self._due[connection] = time.monotonic() + self.seconds

    def done(self, connection: socket.socket) -> None:
        """The request is read: the connection may stay open as long as its job runs."""
        with self._lock:
            self._due.pop(connection, None)

    def expired(self, connection: socket.socket) -> bool:
        with self._lock:
            return connection in self._late

    def forget(self, connection: socket.socket) -> None:
        with self._lock:
            self._due.pop(connection, None)
            self._late.discard(connection)

    def stop(self) -> None:
        self._stop.set()

    def _reap(self) -> None:
        while not self._stop.wait(0.2):
            now = time.monotonic()
            with self._lock:
                late = [c for c, due in self._due.items() if due <= now and c not in self._late]
                self._late.update(late)
            for connection in late:
                try:  # a blocked read returns at once with what came
                    connection.shutdown(socket.SHUT_RD)
                except OSError:
                    pass


class InFlight:
    """Jobs being judged or answered: stopping waits a little for their 503s."""

    def __init__(self) -> None:
        self._count = 0
        self._condition = threading.Condition()

    def __enter__(self) -> None:
        with self._condition:
            self._count += 1

    def __exit__(self, *exc_info: Any) -> None:
        with self._condition:
            self._count -= 1
            self._condition.notify_all()

    def wait_idle(self, seconds: float) -> bool:
        with self._condition:
            return self._condition.wait_for(lambda: self._count == 0, seconds)


class _Handler(BaseHTTPRequestHandler):
    server: "ServiceServer"
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        # Each read and write; a little past the whole request's deadline, which acts first.
        # (typeshed makes timeout a ClassVar; StreamRequestHandler.setup reads it per instance)
        self.timeout = self.server.settings.read_timeout_s + 1.0  # type: ignore[misc]
        super().setup()
        self._unread = False  # a body left unread: read away before closing
        self.server.deadlines.watch(self.connection)

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()

    def finish(self) -> None:
        try:
            super().finish()
            if self._unread:
                _drain(self.connection)
        except OSError:
            pass
        finally:
            self.server.deadlines.forget(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        log.debug("service: " + format, *args)

    def do_GET(self) -> None:  # noqa: N802 - the base's name
        if self._late() or not self._authorised():
            return
        self.server.deadlines.done(self.connection)
        if self.path == "/v1/health":
            self._answer(200, self.server.pool.health())
        else:
            self._answer(404, {"error": f"no such path: {self.path}"})

    def do_POST(self) -> None:  # noqa: N802 - the base's name
        self._unread = True
        if self._late():
            return
        length = self._content_length()
        if length is None or not self._authorised():
            return
        if self.path != "/v1/judge":
            self._answer(404, {"error": f"no such path: {self.path}"})
            return
        body = self._read_body(length)
        if body is None:
            return
        job = self._parse(body)
        if job is not None:
            with self.server.jobs:
                self._judge(job)

    def _late(self) -> bool:
        """Whether the request took longer than its deadline to arrive (answered 408)."""
        if not self.server.deadlines.expired(self.connection):
            return False
        self._answer(408, {"error": f"the request did not arrive within "
                                    f"{self.server.settings.read_timeout_s:g} s"})
        return True

    def _content_length(self) -> int | None:
        """The body's declared length, checked before anything is read; None once answered."""
        if self.headers.get("Transfer-Encoding"):
            self._answer(411, {"error": "send the job with a Content-Length, not chunked"})
            return None
        given = self.headers.get("Content-Length")
        if given is None:
            self._answer(411, {"error": "a job needs a Content-Length header"})
            return None
        if not given.strip().isdigit():
            self._answer(400, {"error": f"header Content-Length must be a number of bytes, "
                                        f"not {given[:40]!r}"})
            return None
        length = int(given)
        if not 0 < length <= MAX_BODY_BYTES:
            self._answer(413, {"error": f"header Content-Length is {length}: a job must be "
                                        f"1 to {MAX_BODY_BYTES} bytes of JSON"})
            return None
        return length

    def _read_body(self, length: int) -> bytes | None:
        try:
            body = self.rfile.read(length)
        except OSError:  # the per-read timeout, or a reset
            body = b""
        if len(body) == length:
            self._unread = False
            self.server.deadlines.done(self.connection)
            return body
        if not self._late():
            self._answer(400, {"error": f"the body ended after {len(body)} of the {length} "
                                        "bytes its Content-Length header gave"})
        return None

    def _parse(self, body: bytes) -> JudgeJob | None:
        try:
            return JudgeJob.from_dict(json.loads(body))
        except RecursionError:
            self._answer(400, {"error": "the job is not JSON this service reads: "
                                        "nested too deeply"})
        except KernelEvoError as exc:
            self._answer(400, {"error": str(exc)})
        except ValueError as exc:  # not JSON, not UTF-8
            self._answer(400, {"error": f"the job is not JSON: {exc}"})
        return None

    def _judge(self, job: JudgeJob) -> None:
        started = time.perf_counter()
        try:
            verdicts, gpu = self._judge_watching(job)
        except JobCancelled:
            if sandbox.stopping():
                self._answer(503, {"error": "the service is stopping"})
            else:
                log.info("service: a client left; its job was cancelled and its processes killed")
            return
        except (GateAbandoned, sandbox.JobsStopped):
            self._answer(503, {"error": "the service is stopping"})
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

    def _judge_watching(self, job: JudgeJob) -> tuple[list[Any], int | None]:
        """The pool's answer, judged in a thread while this one watches the client."""
        control = JobControl()
        answers: list[tuple[list[Any], int | None]] = []
        errors: list[BaseException] = []

        def work() -> None:
            try:
                answers.append(self.server.pool.judge(job, control))
            except BaseException as exc:  # noqa: BLE001 - raised again in the handler's thread
                errors.append(exc)

        worker = threading.Thread(target=work, name="kernelevo-job", daemon=True)
        worker.start()
        killed_at = 0.0
        while worker.is_alive():
            worker.join(_WATCH_S)
            gone = control.cancelled.is_set() or sandbox.stopping() or _client_gone(
                self.connection)
            if gone and worker.is_alive() and time.monotonic() - killed_at > _KILL_EVERY_S:
                self.server.pool.cancel(control)
                killed_at = time.monotonic()
        if control.cancelled.is_set() and not errors:
            raise JobCancelled("the job was cancelled")
        if errors:
            raise errors[0]
        return answers[0]

    def _authorised(self) -> bool:
        given = self.headers.get("Authorization", "")
        expected = f"Bearer {self.server.settings.token}"
        if hmac.compare_digest(given.encode(errors="replace"), expected.encode()):
            return True
        self._answer(401, {"error": "a valid token is needed (Authorization: Bearer ...)"})
        return False

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # gone, or not reading within read_timeout_s
            log.debug("service: a client left before its %d answer", status)


def _client_gone(connection: socket.socket) -> bool:
    """Whether the client closed its connection (it sends nothing more while it waits)."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        if not readable:
            return False
        return connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except (OSError, ValueError):
        return True


def _drain(connection: socket.socket) -> None:
    """Read away what the client still sends (bounded), so closing does not reset the answer."""
    connection.shutdown(socket.SHUT_WR)
    deadline, taken = time.monotonic() + _DRAIN_S, 0
    while taken < _DRAIN_BYTES and time.monotonic() < deadline:
        connection.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = connection.recv(65536)
        if not chunk:
            return
        taken += len(chunk)


class ServiceServer(ThreadingHTTPServer):
    """The service's HTTP server: a thread per connection, MAX_CONNECTIONS at once."""

    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS

    def __init__(self, settings: ServiceSettings, pool: JudgePool) -> None:
        # Made first: a bind that fails calls server_close(), which stops them.
        self.deadlines = ReadDeadlines(settings.read_timeout_s)
        try:
            super().__init__((settings.host, settings.port), _Handler)
        except OSError as exc:
            raise bind_error(settings.host, settings.port, exc) from None
        self.settings, self.pool = settings, pool
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.jobs = InFlight()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning("service: %d connections open; refusing one from %s",
                        MAX_CONNECTIONS, client_address[0])
            _refuse(request)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (OSError, ValueError)):  # a client's fault: reset, garbage
            log.debug("service: a connection from %s ended: %r", client_address[0], error)
        else:
            log.exception("service: a request from %s failed", client_address[0])

    def server_close(self) -> None:
        super().server_close()
        self.deadlines.stop()


def _refuse(request: socket.socket) -> None:
    body = b'{"error": "too many connections: try again shortly"}'
    try:
        request.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
                     socket.MSG_DONTWAIT)
    except OSError:
        pass
