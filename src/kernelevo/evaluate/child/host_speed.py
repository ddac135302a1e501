"""The host's own speed while a call measure runs, and what it does to a speedup's interval.

A launch-bound call's time is host time, and the host's speed is not
constant: on a fresh H100 machine a fixed Python loop pinned to one core took
591 us at its 5th percentile and 915 us at its median over 8 s, with nothing
else running and no steal time reported (bench/RESULTS.md, "A noisy
machine"). The judge's rounds interleave the contestants, so each round's
speedup sees one speed; a rerun that times one contestant and then the other
(a plain process, a user's loop) sees two, and its speedup moves with their
ratio. So the call measure times this loop before every round, and a
launch-bound pair's interval is at least as wide as the loop's spread.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Iterator

from kernelevo.evaluate.shared.messages import HostQuiet, Sender
from kernelevo.evaluate.shared.replies import QuietReply

_PROBE_STEPS = 4000  # about 100 us of Python on a server core
# Spread (third quartile over first, less one) below which nothing is said.
NOTED_SPREAD = 0.05
# A contestant whose host time to queue one call is this share of its time
# per call or more is launch-bound: its call time is the host's.
LAUNCH_BOUND_SHARE = 0.7


def probe_us() -> float:
    """Microseconds of a fixed pure-Python loop: the host's speed at this moment."""
    started = time.perf_counter()
    total = 0
    for step in range(_PROBE_STEPS):
        total += step
    return (time.perf_counter() - started) * 1e6


def spread(samples_us: list[float]) -> float:
    """The probes' third quartile over their first, less one (0 with fewer than 4)."""
    if len(samples_us) < 4:
        return 0.0
    low, _, high = statistics.quantiles(samples_us, n=4)
    return max(high / low - 1.0, 0.0) if low > 0 else 0.0


def launch_bound(per_call_ms: float, queue_ms: float) -> bool:
    """Whether a warm-up's (ms per call, host ms to queue one) make a launch-bound call."""
    return per_call_ms > 0 and queue_ms >= LAUNCH_BOUND_SHARE * per_call_ms


def widened(interval: list[float], point: float, host_spread: float) -> list[float]:
    """`interval` at least `host_spread` either side of `point`."""
    if host_spread <= 0:
        return interval
    return [min(interval[0], point / (1 + host_spread)),
            max(interval[1], point * (1 + host_spread))]


def note(host_spread: float, bound: list[str]) -> str | None:
    """What the verdict says of a spread worth saying, naming the launch-bound contestants."""
    if host_spread < NOTED_SPREAD:
        return None
    who = (f"; launch-bound: {', '.join(bound)}, whose call intervals are at least that wide"
           if bound else "; no contestant is launch-bound")
    return (f"the host's speed moved {host_spread:.0%} while the calls were timed (quartiles "
            f"of a fixed Python loop before each round){who}: a rerun that times one "
            "contestant after the other moves as much")


class QuietHost:
    """Asks the judge to stand its other jobs still while a call measure runs
    (sandbox/quiet.py), and says afterwards how many did; `asks` False asks nothing."""

    def __init__(self, channel: Sender, asks: bool) -> None:
        self.channel, self.asks = channel, asks
        self.most = 0  # the most of the judge's other jobs held at once
        self.cut_s = 0.0  # a quiet ran past the judge's limit, these seconds, and others went on

    @contextlib.contextmanager
    def __call__(self) -> Iterator[int]:
        if not self.asks:
            yield 0
            return
        held = QuietReply.from_json(self.channel.ask(HostQuiet(on=True))).held
        self.most = max(self.most, held)
        try:
            yield held
        finally:
            ended = QuietReply.from_json(self.channel.ask(HostQuiet(on=False)))
            self.cut_s = self.cut_s or ended.cut_s

    def note(self) -> str | None:
        """The verdict's note, where others stood still."""
        if not self.most:
            return None
        cut = (f"; the calls took longer than the {self.cut_s:g} s the judge holds them for, "
               "and they went on" if self.cut_s else "")
        return (f"call time: the judge's other jobs ({self.most} at most) stood still while "
                f"the calls were timed, as a plain process times on a quiet machine "
                f"([eval.timing] hold_other_jobs){cut}")
