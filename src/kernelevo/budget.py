"""Budgets in tokens, dollars, candidates and wall time that are never overrun.

A call first reserves its worst case (every input and output token it could
use); the reservation is refused when that worst case, added to everything
spent and everything still reserved, could cross any limit. When the call
returns, its actual usage replaces the worst case. So no call is issued that
could cross the budget, however many run at once.

A refusal is temporary when it is caused by other calls' reservations
(`fits_alone` is still true: waiting for them to settle may make room) and
final when the call could not fit even with nothing in flight.

Usage above a call's worst case (a server that ignores max_tokens or counts
hidden tokens) is an overshoot. It is charged in full, never dropped, and
counted in `BudgetUsage.overshoot_*` (the caller flags it); from then on every
reservation also holds the largest overshoot seen so far as padding. The
bound: no call is admitted once its padded worst case could cross a limit, so
spending ends above a limit only through the calls in flight at the last
admission, each by its overshoot beyond its padding: at most c times the
largest single overshoot with c calls in flight (one call's overshoot when
calls run one at a time), and nothing once overshoots are no larger than
ones already seen. The model pool never settles a call above its reservation
(llm/charges.py charges implausible usage the worst case), so its calls never
overshoot; the padding guards other callers.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kernelevo.errors import ConfigError
from kernelevo.schema import NON_NEGATIVE, Annotated, check_fields

DEFAULT_TOKEN_BUDGET = 1_000_000


class PriceLike(Protocol):
    """What a budget needs of a price (see kernelevo.llm.pricing.Price)."""

    @property
    def known(self) -> bool: ...  # read-only: Price is a frozen dataclass

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float: ...


@dataclass(frozen=True)
class BudgetLimits:
    """Limits of one run; None means unlimited."""

    tokens: Annotated[int | None, NON_NEGATIVE] = DEFAULT_TOKEN_BUDGET
    usd: Annotated[float | None, NON_NEGATIVE] = None
    candidates: Annotated[int | None, NON_NEGATIVE] = None
    wall_s: Annotated[float | None, NON_NEGATIVE] = None

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class Reservation:
    """The worst case of one call (plus padding for overshoots), held until it is settled."""

    id: int
    tokens: int
    cost_usd: float
    padding_tokens: int = 0
    padding_usd: float = 0.0


@dataclass(frozen=True)
class BudgetUsage:
    """What has been spent and what is still reserved."""

    tokens: int
    cost_usd: float
    candidates: int
    elapsed_s: float
    reserved_tokens: int
    reserved_usd: float
    outstanding: int
    overshoot_tokens: int = 0  # charged above calls' worst cases, in total
    overshoot_usd: float = 0.0


class Budget:
    """Spent and reserved amounts against limits; safe for threads and one event loop."""

    def __init__(
        self,
        tokens: int | None = DEFAULT_TOKEN_BUDGET,
        usd: float | None = None,
        candidates: int | None = None,
        wall_s: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = BudgetLimits(tokens, usd, candidates, wall_s)
        self._clock = clock
        self._started_s = clock()
        # No await happens while it is held, so a plain lock also keeps
        # coroutines of one loop consistent, and threads too.
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._outstanding: dict[int, Reservation] = {}
        self._tokens = 0
        self._cost_usd = 0.0
        self._candidates = 0
        self._elapsed_before_s = 0.0
        # The largest overshoot of one call seen so far, held by every new reservation.
        self._padding_tokens = 0
        self._padding_usd = 0.0
        self._overshoot_tokens = 0
        self._overshoot_usd = 0.0

    def restore(self, tokens: int, cost_usd: float, candidates: int, elapsed_s: float) -> None:
        """Count what a resumed run had already spent before this process started."""
        with self._lock:
            self._tokens += tokens
            self._cost_usd += cost_usd
            self._candidates += candidates
            self._elapsed_before_s += elapsed_s

    def reserve(
        self,
        max_input_tokens: int,
        max_output_tokens: int,
        price: PriceLike,
        *,
        max_duration_s: float = 0.0,
    ) -> Reservation | None:
        """Hold the worst case of one call, or None when it could cross a limit."""
        tokens, cost_usd = self._worst_case(max_input_tokens, max_output_tokens, price)
        with self._lock:
            tokens, cost_usd = tokens + self._padding_tokens, cost_usd + self._padding_usd
            if self._exhausted_locked() is not None:
                return None
            if not self._fits_locked(tokens, cost_usd, max_duration_s):
                return None
            reservation = Reservation(next(self._ids), tokens, cost_usd,
                                      self._padding_tokens, self._padding_usd)
            self._outstanding[reservation.id] = reservation
            return reservation

    def fits_alone(self, max_input_tokens: int, max_output_tokens: int, price: PriceLike) -> bool:
        """Whether the call would fit with nothing in flight; False means no wait can help."""
        tokens, cost_usd = self._worst_case(max_input_tokens, max_output_tokens, price)
        with self._lock:
            tokens, cost_usd = tokens + self._padding_tokens, cost_usd + self._padding_usd
            return self._exhausted_locked() is None and self._fits_locked(
                tokens, cost_usd, 0.0, in_flight=False)

    def _worst_case(self, max_input_tokens: int, max_output_tokens: int,
                    price: PriceLike) -> tuple[int, float]:
        if self.limits.usd is not None and not price.known:
            raise ConfigError(
                f"a dollar budget of {self.limits.usd} USD is set but the model's price is "
                "unknown: add it under [llm.prices] in the config, or drop --usd"
            )
        tokens = max_input_tokens + max_output_tokens
        return tokens, price.cost_usd(max_input_tokens, max_output_tokens)

    def settle(
        self, reservation: Reservation, actual_in: int, actual_out: int, cost_usd: float
    ) -> None:
        """Replace the reservation's worst case by what the call actually used, all of it."""
        with self._lock:
            if self._outstanding.pop(reservation.id, None) is None:
                raise ValueError(
                    f"reservation {reservation.id} is not outstanding: settle each one once"
                )
            self._tokens += actual_in + actual_out
            self._cost_usd += cost_usd
            self._note_overshoot(reservation, actual_in + actual_out, cost_usd)

    def _note_overshoot(self, reservation: Reservation, tokens: int, cost_usd: float) -> None:
        over_tokens = max(0, tokens - (reservation.tokens - reservation.padding_tokens))
        over_usd = max(0.0, cost_usd - (reservation.cost_usd - reservation.padding_usd))
        if over_usd <= 1e-12:  # float noise of a price computed twice
            over_usd = 0.0
        self._overshoot_tokens += over_tokens
        self._overshoot_usd += over_usd
        self._padding_tokens = max(self._padding_tokens, over_tokens)
        self._padding_usd = max(self._padding_usd, over_usd)

    def release(self, reservation: Reservation) -> None:
        """Settle a call that failed without reported usage as costing nothing."""
        self.settle(reservation, 0, 0, 0.0)

    def count_candidate(self) -> bool:
        """Count one candidate; False, counting nothing, when the limit is reached.

        Each outstanding reservation holds one candidate slot, so settle a call
        before counting the candidate it produced.
        """
        with self._lock:
            limit = self.limits.candidates
            if limit is not None and self._candidates + len(self._outstanding) >= limit:
                return False
            self._candidates += 1
            return True

    def exhausted(self) -> str | None:
        """Why the budget is spent, or None while something remains."""
        with self._lock:
            return self._exhausted_locked()

    def usage(self) -> BudgetUsage:
        """A snapshot of spent and reserved amounts."""
        with self._lock:
            return BudgetUsage(
                tokens=self._tokens,
                cost_usd=self._cost_usd,
                candidates=self._candidates,
                elapsed_s=self._elapsed_s(),
                reserved_tokens=sum(r.tokens for r in self._outstanding.values()),
                reserved_usd=sum(r.cost_usd for r in self._outstanding.values()),
                outstanding=len(self._outstanding),
                overshoot_tokens=self._overshoot_tokens,
                overshoot_usd=self._overshoot_usd,
            )

    def _elapsed_s(self) -> float:
        return self._elapsed_before_s + self._clock() - self._started_s

    def _fits_locked(self, tokens: int, cost_usd: float, duration_s: float,
                     in_flight: bool = True) -> bool:
        limits = self.limits
        outstanding = list(self._outstanding.values()) if in_flight else []
        if limits.tokens is not None:
            if self._tokens + sum(r.tokens for r in outstanding) + tokens > limits.tokens:
                return False
        if limits.usd is not None:
            if self._cost_usd + sum(r.cost_usd for r in outstanding) + cost_usd > limits.usd:
                return False
        if limits.candidates is not None:
            if self._candidates + len(outstanding) + 1 > limits.candidates:
                return False
        if limits.wall_s is not None and self._elapsed_s() + duration_s > limits.wall_s:
            return False
        return True

    def _exhausted_locked(self) -> str | None:
        limits = self.limits
        if limits.tokens is not None and self._tokens >= limits.tokens:
            return (
                f"token budget spent: {self._tokens:,} of {limits.tokens:,} tokens "
                "(raise --tokens)"
            )
        if limits.usd is not None and self._cost_usd >= limits.usd:
            return f"dollar budget spent: {self._cost_usd:.4f} of {limits.usd} USD (raise --usd)"
        if limits.candidates is not None and self._candidates >= limits.candidates:
            return f"candidate budget spent: {self._candidates} of {limits.candidates} candidates"
        if limits.wall_s is not None and self._elapsed_s() >= limits.wall_s:
            return (
                f"time budget spent: {self._elapsed_s():.0f} of {limits.wall_s:.0f} s "
                "(raise --time)"
            )
        return None


_COUNT_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9}
_DURATION_UNITS_S = {"d": 86400.0, "h": 3600.0, "min": 60.0, "m": 60.0, "s": 1.0, "": 1.0}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_COUNT = re.compile(rf"{_NUMBER}\s*([kKmMgGbB]?)")
_DURATION_PART = re.compile(rf"{_NUMBER}\s*(d|h|min|m|s|)", re.IGNORECASE)


def parse_tokens(text: str) -> int:
    """A token count: "1M", "250k", "1_000_000", "1.5m" (k, M and G/B are case-free)."""
    match = _COUNT.fullmatch(text.strip().replace("_", "").replace(",", ""))
    if match is None:
        raise ConfigError(f"cannot read {text!r} as a token count: write e.g. 1M, 250k or 500000")
    value = float(match.group(1)) * _COUNT_SUFFIXES[match.group(2).lower()]
    if value != int(value):
        raise ConfigError(f"{text!r} is not a whole number of tokens: write e.g. 1.5M or 250k")
    return int(value)


def parse_usd(text: str) -> float:
    """A dollar amount: "2", "$0.50", "2 USD"."""
    cleaned = re.sub(r"(?i)\s*usd$", "", text.strip()).lstrip("$").strip()
    if not re.fullmatch(_NUMBER, cleaned):
        raise ConfigError(f"cannot read {text!r} as dollars: write e.g. 2 or 0.50")
    return float(cleaned)


def parse_duration_s(text: str) -> float:
    """A duration in seconds: "2h", "90m", "30s", "1h30m", "45" (seconds)."""
    cleaned = text.strip().replace(" ", "")
    parts = list(_DURATION_PART.finditer(cleaned))
    if not cleaned or "".join(p.group(0) for p in parts) != cleaned:
        raise ConfigError(f"cannot read {text!r} as a duration: write e.g. 2h, 90m, 30s or 1h30m")
    return sum(float(p.group(1)) * _DURATION_UNITS_S[p.group(2).lower()] for p in parts)


_PARSERS: dict[str, Callable[[str], float]] = {
    "tokens": parse_tokens, "usd": parse_usd, "duration": parse_duration_s,
}


def parse_amount(text: str, kind: str | None = None) -> float:
    """Parse a budget amount of `kind` ("tokens", "usd", "duration").

    Without a kind the suffix decides: d, h, m, min, s are durations (in
    seconds) and k, M, G are counts; a lone lower-case "m" means minutes, so
    write "1M" (or pass kind="tokens") for a million.
    """
    if kind is not None:
        if kind not in _PARSERS:
            raise ValueError(f"unknown amount kind {kind!r}: use one of {', '.join(_PARSERS)}")
        return _PARSERS[kind](text)
    stripped = text.strip()
    if re.search(r"(?i)(d|h|min|s)$", stripped) or stripped.endswith("m"):
        return parse_duration_s(stripped)
    if stripped.startswith("$") or stripped.lower().endswith("usd"):
        return parse_usd(stripped)
    return parse_tokens(stripped)
