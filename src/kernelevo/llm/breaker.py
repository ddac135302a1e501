"""A circuit breaker shared by every call to one endpoint.

Each call retries on its own, so without this a dead endpoint makes every
call fail slowly, one after another, forever. The breaker counts failed
attempts (connection errors, timeouts, 429 and 5xx, garbled answers) across
calls. It opens after `failures` of them in a row spanning `min_span_s`, or
once attempts have kept failing for `give_up_s` with no success in between
(refusals, 4xx, break the streak but are no success). A successful answer
resets both; a refusal resets the streak only. Once open it stays open: the
run stops and says which endpoint failed and how.

It also carries the endpoint's Retry-After: once a server asks every
client to wait, no call sends a request before that moment.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kernelevo.errors import ConfigError, LLMUnavailable

DEFAULT_GIVE_UP_S = 600.0


class CircuitBreaker:
    """Opens on a lasting streak of failed attempts, or on failures alone for `give_up_s`."""

    def __init__(self, failures: int = 8, min_span_s: float = 30.0,
                 give_up_s: float = DEFAULT_GIVE_UP_S, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if failures < 1:
            raise ConfigError(f"breaker_failures is {failures}: give 1 or more")
        if not min_span_s >= 0:
            raise ConfigError(f"breaker_min_s is {min_span_s}: give a number of seconds >= 0")
        if not give_up_s > 0:
            raise ConfigError(f"give_up_s is {give_up_s}: give a number of seconds > 0")
        self.failures, self.min_span_s, self.give_up_s = failures, min_span_s, give_up_s
        self._clock = clock
        self._lock = threading.Lock()
        self._streak = 0
        self._streak_started_s: float | None = None
        self._failing_since_s: float | None = None  # the first failure since a success
        self._resume_at_s = 0.0
        self._opened: str | None = None

    @property
    def open(self) -> bool:
        """Whether calls are refused for good."""
        return self._opened is not None

    def check(self) -> None:
        """Raise LLMUnavailable once the breaker is open, so no request is sent."""
        if self._opened is not None:
            raise LLMUnavailable(self._opened)

    def succeeded(self) -> None:
        """An attempt got a usable answer: the endpoint serves."""
        with self._lock:
            self._streak, self._streak_started_s = 0, None
            self._failing_since_s = None

    def answered(self) -> None:
        """The server refused a request (4xx): alive, though it served nothing."""
        with self._lock:
            self._streak, self._streak_started_s = 0, None

    def hold(self, wait_s: float) -> None:
        """The server asked every client to wait `wait_s` seconds (Retry-After)."""
        with self._lock:
            self._resume_at_s = max(self._resume_at_s, self._clock() + wait_s)

    def wait_s(self) -> float:
        """Seconds to wait before the next request, as the server last asked."""
        with self._lock:
            return max(0.0, self._resume_at_s - self._clock())

    def trip(self, reason: str) -> None:
        """Open at once: retrying cannot help (the server asked for a wait too long to honour)."""
        with self._lock:
            if self._opened is None:
                self._opened = reason

    def failed(self, endpoint: str, error: str, attempt_started_s: float) -> bool:
        """Count one failed attempt (started at `attempt_started_s`); True when this opens it."""
        with self._lock:
            if self._opened is not None:
                return False
            self._streak += 1
            if self._streak_started_s is None:
                self._streak_started_s = attempt_started_s
            if self._failing_since_s is None:
                self._failing_since_s = attempt_started_s
            now_s = self._clock()
            since_s = now_s - self._failing_since_s
            if since_s >= self.give_up_s:
                self._opened = (
                    f"no call to the LLM endpoint {endpoint} has succeeded for {since_s:.0f} s "
                    f"({self._streak} failed attempts in a row, the last with: {error}); check "
                    "the endpoint, its rate limits and quota, or raise [llm] give_up_s")
                return True
            # A blip seen at once by every call in flight is many failures in
            # a moment; only a streak that also lasts is an endpoint that is down.
            span_s = now_s - self._streak_started_s
            if self._streak < self.failures or span_s < self.min_span_s:
                return False
            self._opened = (
                f"the LLM endpoint {endpoint} failed {self._streak} attempts in a row over "
                f"{span_s:.0f} s, the last with: {error}; check that it is up and reachable "
                "from this machine (base_url, network, proxy) and that the key has quota "
                "left, or raise [llm] breaker_failures"
            )
            return True
