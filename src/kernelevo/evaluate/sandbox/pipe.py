"""The pipe between the judge and a job's child: the child's side, and the judge's pump.

The child sends JSON messages (`Channel.send`) and asks questions the judge
answers (`Channel.ask`); the judge's side (`pump`) keeps every message in
the job's `JobResult` with the user's secrets redacted, answers it, and
returns once the child has ended (its last messages read), its limit has
passed, or it has printed too much (jobs.py runs the job around it).
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from kernelevo.evaluate.sandbox import redact


class Limit(Protocol):
    """A job's wall-clock limit (jobs.Deadline): when it passes, in time.monotonic()."""

    at: float


@dataclass
class JobResult:
    """What came back from one child: its messages and how it ended."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    timed_out: bool = False
    output_exceeded: bool = False
    log_tail: str = ""
    wall_s: float = 0.0
    exit_wait_s: float = 0.0  # from the kill to the child's exit
    stood_s: float = 0.0  # stood still while other jobs' calls were timed (quiet.py)

    @property
    def final(self) -> dict[str, Any] | None:
        done = [m for m in self.messages if m.get("kind") == "done"]
        return done[-1] if done else None

    @property
    def network(self) -> str:
        """'off' when the child ran in an empty network namespace."""
        found = [m.get("network") for m in self.messages if m.get("kind") == "isolation"]
        return str(found[0]) if found else "unknown"

    @property
    def confinement(self) -> str:
        """The confinement layers the child reported before its work began (confine.py)."""
        found = [m.get("layers") for m in self.messages if m.get("kind") == "isolation"]
        layers = found[0] if found and isinstance(found[0], list) else ["confinement unknown"]
        return ", ".join(str(layer) for layer in layers)

    @property
    def signal_name(self) -> str | None:
        if self.exit_code is not None and self.exit_code < 0:
            try:
                return signal.Signals(-self.exit_code).name
            except ValueError:
                return f"signal {-self.exit_code}"
        return None


class Channel:
    """The child's side of the pipe: JSON messages to the judge, replies back."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    def send(self, kind: str, **payload: Any) -> None:
        self._connection.send_bytes(json.dumps({"kind": kind, **payload}).encode())

    def ask(self, kind: str, **payload: Any) -> dict[str, Any]:
        """Send a message and wait for the judge's reply."""
        self.send(kind, **payload)
        return json.loads(self._connection.recv_bytes())


def pump(process: Any, connection: Any, result: JobResult, deadline: Limit,
          log_path: Path, output_limit_bytes: int,
          on_message: Callable[[dict[str, Any]], dict[str, Any] | None] | None,
          secrets: list[str]) -> None:
    """Relay messages until the child ends, runs out of time or prints too much."""
    while True:
        if connection.poll(0.02):
            if not _relay(connection, result, on_message, secrets):
                process.join(max(0.0, min(1.0, deadline.at - time.monotonic())))
                return
            # messages that never stop (a process it left behind writing on) do not
            # keep the judge past the child's end or its limit
            if time.monotonic() <= deadline.at and process.is_alive():
                continue
        if not process.is_alive():
            # What it sent between the poll above and its end is in the pipe still
            # (its last report, sent just before it exits): read before giving up. A
            # process it left behind may hold the pipe and write on: a few, in time.
            for _ in range(LAST_MESSAGES):
                if time.monotonic() > deadline.at or not _poll_now(connection) \
                        or not _relay(connection, result, on_message, secrets):
                    break
            return
        if time.monotonic() > deadline.at:
            result.timed_out = True
            return
        if log_path.exists() and log_path.stat().st_size > output_limit_bytes:
            result.output_exceeded = True
            return


LAST_MESSAGES = 16  # read from the pipe of a child that has ended (a worker sends two)


def _relay(connection: Any, result: JobResult,
           on_message: Callable[[dict[str, Any]], dict[str, Any] | None] | None,
           secrets: list[str]) -> bool:
    """Read one message, keep it and answer it; False once the child's end is closed."""
    try:
        raw = connection.recv_bytes()
    except (EOFError, OSError):
        return False
    message = redact.redact(_decode(raw), secrets)
    result.messages.append(message)
    reply = on_message(message) if on_message else None
    if reply is not None:
        try:
            connection.send_bytes(json.dumps(reply).encode())
        except OSError:  # the child died while its question was answered: it ended
            return False
    return True


def _poll_now(connection: Any) -> bool:
    try:
        return bool(connection.poll(0))
    except (EOFError, OSError):
        return False


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {"kind": "garbage"}
    return message if isinstance(message, dict) else {"kind": "garbage"}
