"""A circuit breaker shared by every call to one endpoint.

Each call retries on its own, so without this a dead endpoint makes every
call fail slowly, one after another, forever. The breaker counts failed
attempts (connection errors, timeouts, 5xx, garbled answers) across calls;
any answer from a live server resets the count. Once open it stays open:
the run stops and says which endpoint failed and how.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kernelevo.errors import ConfigError
from kernelevo.llm.protocol import LLMUnavailable


class CircuitBreaker:
    """Opens after `failures` failed attempts in a row that span at least `min_span_s`."""

    def __init__(self, failures: int = 8, min_span_s: float = 30.0, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if failures < 1:
            raise ConfigError(f"breaker_failures is {failures}: give 1 or more")
        if min_span_s < 0:
            raise ConfigError(f"breaker_min_s is {min_span_s}: give a number of seconds >= 0")
        self.failures, self.min_span_s = failures, min_span_s
        self._clock = clock
        self._lock = threading.Lock()
        self._streak = 0
        self._streak_started_s: float | None = None
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
        """The server answered: the endpoint is alive, whatever the answer."""
        with self._lock:
            self._streak, self._streak_started_s = 0, None

    def failed(self, endpoint: str, error: str, attempt_started_s: float) -> bool:
        """Count one failed attempt (started at `attempt_started_s`); True when this opens it."""
        with self._lock:
            if self._opened is not None:
                return False
            self._streak += 1
            if self._streak_started_s is None:
                self._streak_started_s = attempt_started_s
            # A blip seen at once by every call in flight is many failures in
            # a moment; only a streak that also lasts is an endpoint that is down.
            span_s = self._clock() - self._streak_started_s
            if self._streak < self.failures or span_s < self.min_span_s:
                return False
            self._opened = (
                f"the LLM endpoint {endpoint} failed {self._streak} attempts in a row over "
                f"{span_s:.0f} s, the last with: {error}; check that it is up and reachable "
                "from this machine (base_url, network, proxy), or raise [llm] breaker_failures"
            )
            return True
