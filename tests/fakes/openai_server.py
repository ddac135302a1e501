"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat completions protocol.

Tests script what it answers, one step per request, in arrival order:

    with FakeOpenAIServer(["first answer", Status(429, retry_after="0.2"), Drop()]) as server:
        client = OpenAICompatClient(ClientConfig(base_url=server.base_url, model="m"))
        ...
        assert len(server.requests) == 3

A step is one of:
    str                      reply with this assistant text (usage computed)
    int                      answer with this HTTP status and an error body
    Reply(text, ...)         reply with control over usage and finish_reason
    Status(code, ...)        an HTTP error, optionally with Retry-After
    Delay(seconds, step)     wait, then answer `step` (a slow server, or a timeout)
    Drop()                   close the socket without any response
    Hang()                   take the request and never answer (until the server stops)
    Trickle(seconds, step)   send `step`'s whole answer one byte every `seconds`
    Malformed(body)          200 with a body that is not the promised JSON
    callable(request_json)   called with the request body; returns any step above

`closed_port_url()` gives a base URL where nothing listens (connection refused).

When the script runs out the server answers `default` (a 500 unless given),
so an unexpected extra call fails loudly instead of hanging a test.
Every request is recorded, and the most requests ever in flight at once is
kept in `max_in_flight`, to check concurrency caps from the outside.

Hostile servers are a `default` that never changes:

    FakeOpenAIServer(default=Status(429))                      # rate-limited for ever
    FakeOpenAIServer(default=Status(429, retry_after="0.3"))   # ... asking for waits
    FakeOpenAIServer(default=QUOTA_SPENT)                      # out of credit
    FakeOpenAIServer(default=500)                              # down for ever
    FakeOpenAIServer(default=Reply("x", prompt_tokens=-570_000))       # lies about usage
    FakeOpenAIServer(default=Reply("x", completion_tokens=10**12))     # ... the other way

and `gaps_s()` gives the seconds between successive requests, to check that
waits were honoured.
"""

from __future__ import annotations

import io
import json
import math
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")


@dataclass(frozen=True)
class Reply:
    """A successful answer; usage defaults to ceil(chars / 4) of prompt and answer."""

    text: str | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    include_usage: bool = True
    finish_reason: str = "stop"
    model: str | None = None  # None echoes the requested model


@dataclass(frozen=True)
class Status:
    """An HTTP error answer with an OpenAI-style error body (`error_type` as its type and code)."""

    code: int
    retry_after: str | None = None
    message: str = "scripted error"
    error_type: str | None = None  # None: rate_limit_exceeded for 429, else server_error


# OpenAI's answer once an account's credit is spent: a 429 that no wait cures.
QUOTA_SPENT = Status(429, message="You exceeded your current quota, please check your plan "
                     "and billing details.", error_type="insufficient_quota")


@dataclass(frozen=True)
class Delay:
    """Wait `seconds`, then answer `then`."""

    seconds: float
    then: Step = "delayed answer"


@dataclass(frozen=True)
class Drop:
    """Close the connection without sending any response."""


@dataclass(frozen=True)
class Hang:
    """Take the request and send nothing back, ever (until the server stops)."""


@dataclass(frozen=True)
class Trickle:
    """Send the answer `then` (a reply or a status) one byte every `seconds`, status line first.

    Each byte arrives well within a client's idle limit, so only a deadline
    for the whole answer ends the call.
    """

    seconds: float
    then: Step = "trickled answer"


@dataclass(frozen=True)
class Malformed:
    """A 200 answer whose body is not valid chat completion JSON."""

    body: str = '{"id": "chatcmpl-fake", "choices": [{"index": 0, "mess'


Step = Union[str, int, Reply, Status, Delay, Drop, Hang, Trickle, Malformed,
             Callable[[dict], Any]]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it; `body` is None when it was not JSON."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict | None
    received_at_s: float  # time.monotonic() on arrival


@dataclass
class _State:
    script: deque
    default: Any
    api_key: str | None
    models: tuple[str, ...]
    requests: list[RecordedRequest] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)


def closed_port_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens: every connection is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The port was free a moment ago and nothing listens on it now (a small race
    # with other processes, fine for tests).
    return f"http://127.0.0.1:{port}/v1"


class FakeOpenAIServer:
    """The scripted server; a context manager that starts and stops it."""

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        default: Step = Status(500, message="the fake server's script ran out"),
        api_key: str | None = None,
        models: Iterable[str] = ("fake-model",),
    ) -> None:
        """`api_key`, when given, makes every request without that bearer key a 401."""
        self._state = _State(deque(script), default, api_key, tuple(models))
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The URL to give a client, ending in /v1."""
        if self._server is None:
            raise RuntimeError("the fake server is not running: use it as a context manager")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order."""
        with self._state.lock:
            return list(self._state.requests)

    def gaps_s(self) -> list[float]:
        """Seconds between each request's arrival and the next one's."""
        times = [request.received_at_s for request in self.requests]
        return [later - earlier for earlier, later in zip(times, times[1:])]

    @property
    def max_in_flight(self) -> int:
        """The most requests that were being answered at the same moment."""
        return self._state.max_in_flight

    def add(self, *steps: Step) -> None:
        """Append steps to the script, e.g. between phases of a test."""
        with self._state.lock:
            self._state.script.extend(steps)

    def start(self) -> FakeOpenAIServer:
        """Listen on an ephemeral port and answer in a background thread."""
        handler = type("Handler", (_Handler,), {"state": self._state})
        self._server = _QuietServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        # A short poll interval makes stop() quick, which keeps many small tests fast.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering; delayed answers are cut short."""
        self._state.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class _QuietServer(ThreadingHTTPServer):
    """Clients that hang up (their timeout, a cancelled call, a run that ended) are no error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like real endpoints
    # Headers and body go out in two writes; without this, Nagle's algorithm
    # and delayed ACKs add about 40 ms to every answer on a kept-alive socket.
    disable_nagle_algorithm = True
    state: _State

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        self._record(None)
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            data = [{"id": m, "object": "model", "owned_by": "fake"} for m in self.state.models]
            self._send_json(200, {"object": "list", "data": data})
        else:
            self._send_json(404, _error_body(f"no route {self.path}", "not_found"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self._record(body)
        with self.state.lock:
            self.state.in_flight += 1
            self.state.max_in_flight = max(self.state.max_in_flight, self.state.in_flight)
        try:
            self._answer(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout) before the answer was ready
        finally:
            with self.state.lock:
                self.state.in_flight -= 1

    def _answer(self, body: dict | None) -> None:
        if self.path.rstrip("/") not in CHAT_PATHS:
            self._send_json(404, _error_body(f"no route {self.path}", "not_found"))
            return
        if body is None:
            self._send_json(400, _error_body("request body is not JSON", "invalid_request_error"))
            return
        if not self._authorised():
            self._send_json(401, _error_body("Incorrect API key provided", "invalid_api_key"))
            return
        with self.state.lock:
            step = self.state.script.popleft() if self.state.script else self.state.default
        self._play(step, body)

    def _authorised(self) -> bool:
        expected = self.state.api_key
        return expected is None or self.headers.get("Authorization") == f"Bearer {expected}"

    def _play(self, step: Any, body: dict) -> None:
        if callable(step):  # dataclass steps are not callable
            step = step(body)
        if isinstance(step, Delay):
            if not self.state.stopping.wait(step.seconds):
                self._play(step.then, body)
        elif isinstance(step, Drop):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif isinstance(step, Hang):
            self.state.stopping.wait()
            self.close_connection = True
        elif isinstance(step, Trickle):
            self._trickle(step, body)
        elif isinstance(step, Malformed):
            self._send_raw(200, step.body.encode())
        elif isinstance(step, (Status, int)):
            self._send_status(step if isinstance(step, Status) else Status(step))
        elif isinstance(step, (Reply, str)):
            reply = step if isinstance(step, Reply) else Reply(step)
            self._send_json(200, _completion_body(reply, body))
        else:
            raise TypeError(f"unknown script step {step!r}: see the FakeOpenAIServer docstring")

    def _trickle(self, step: Trickle, body: dict) -> None:
        """The answer of `step.then`, written whole into a buffer, then sent a byte at a time."""
        real, self.wfile = self.wfile, io.BytesIO()
        try:
            self._play(step.then, body)
            answer = self.wfile.getvalue()
        finally:
            self.wfile = real
        self.close_connection = True
        for offset in range(len(answer)):
            if self.state.stopping.wait(step.seconds):
                return
            real.write(answer[offset:offset + 1])
            real.flush()

    def _send_status(self, status: Status) -> None:
        headers = {"Retry-After": status.retry_after} if status.retry_after is not None else {}
        error_type = status.error_type or (
            "rate_limit_exceeded" if status.code == 429 else "server_error")
        self._send_json(status.code, _error_body(status.message, error_type), headers)

    def _send_json(self, code: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        self._send_raw(code, json.dumps(payload).encode(), headers)

    def _send_raw(self, code: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _record(self, body: dict | None) -> None:
        request = RecordedRequest(
            self.command, self.path, dict(self.headers.items()), body, time.monotonic()
        )
        with self.state.lock:
            self.state.requests.append(request)


def _error_body(message: str, error_type: str) -> dict:
    return {"error": {"message": message, "type": error_type, "code": error_type}}


def _completion_body(reply: Reply, request: dict) -> dict:
    text = reply.text or ""
    prompt_chars = sum(len(str(m.get("content", ""))) for m in request.get("messages", []))
    prompt_tokens = _or_estimate(reply.prompt_tokens, prompt_chars)
    completion_tokens = _or_estimate(reply.completion_tokens, len(text))
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model or request.get("model", "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text},
                "finish_reason": reply.finish_reason,
            }
        ],
    }
    if reply.include_usage:
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    return body


def _or_estimate(tokens: int | None, chars: int) -> int:
    return tokens if tokens is not None else math.ceil(chars / 4)
