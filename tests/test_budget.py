"""Budgets: reservations never let spending cross a limit, and amounts parse."""

from __future__ import annotations

import asyncio
import pickle
import random
import threading

import pytest

from kernelevo.budget import (
    DEFAULT_TOKEN_BUDGET,
    Budget,
    parse_amount,
    parse_duration_s,
    parse_tokens,
    parse_usd,
)
from kernelevo.errors import BudgetExhausted, ConfigError
from kernelevo.llm.pricing import UNKNOWN_PRICE, Price

FREE = Price(0.0, 0.0)


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_default_is_a_million_tokens_and_nothing_else():
    budget = Budget()
    assert budget.limits.tokens == DEFAULT_TOKEN_BUDGET == 1_000_000
    assert (budget.limits.usd, budget.limits.candidates, budget.limits.wall_s) == (None, None, None)


def test_reservation_is_refused_when_its_worst_case_could_cross():
    budget = Budget(tokens=1000)
    assert budget.reserve(600, 400, FREE) is not None  # exactly at the limit is fine
    assert budget.reserve(1, 0, FREE) is None


def test_outstanding_reservations_count_at_their_worst_case():
    budget = Budget(tokens=1000)
    first = budget.reserve(300, 300, FREE)
    assert budget.reserve(300, 300, FREE) is None
    budget.settle(first, 100, 50, 0.0)  # actuals replace the worst case
    assert budget.usage().tokens == 150
    assert budget.reserve(300, 300, FREE) is not None
    assert budget.usage().reserved_tokens == 600


def test_a_refusal_caused_by_calls_in_flight_is_temporary():
    budget = Budget(tokens=1000)
    first = budget.reserve(300, 300, FREE)
    assert budget.reserve(300, 300, FREE) is None
    assert budget.fits_alone(300, 300, FREE)  # waiting for `first` can make room
    budget.settle(first, 400, 200, 0.0)
    assert not budget.fits_alone(300, 300, FREE)  # 600 spent: no wait can help now
    assert budget.fits_alone(200, 200, FREE)


def test_fits_alone_is_false_once_a_limit_is_spent():
    budget = Budget(tokens=None, candidates=1)
    assert budget.fits_alone(10, 10, FREE)
    assert budget.count_candidate()
    assert not budget.fits_alone(10, 10, FREE)


def test_usage_above_the_worst_case_is_charged_counted_and_padded():
    budget = Budget(tokens=1000)
    budget.settle(budget.reserve(100, 100, FREE), 150, 150, 0.0)  # 100 over its worst case
    usage = budget.usage()
    assert (usage.tokens, usage.overshoot_tokens) == (300, 100)
    padded = budget.reserve(100, 100, FREE)
    assert padded.tokens == 300 and padded.padding_tokens == 100
    assert budget.usage().reserved_tokens == 300
    budget.settle(padded, 150, 150, 0.0)  # the same overshoot: covered by its padding
    assert budget.usage().overshoot_tokens == 200


def test_after_one_overshoot_later_ones_of_the_same_size_never_cross_the_limit():
    budget = Budget(tokens=1000)
    budget.settle(budget.reserve(100, 100, FREE), 150, 150, 0.0)
    while (reservation := budget.reserve(100, 100, FREE)) is not None:
        budget.settle(reservation, 150, 150, 0.0)
    assert budget.usage().tokens == 900 <= budget.limits.tokens


@pytest.mark.parametrize("in_flight", [1, 4])
def test_overshoots_cross_the_limit_by_at_most_the_documented_bound(in_flight):
    rng = random.Random(in_flight)
    limit = 100_000
    budget = Budget(tokens=limit)
    largest = 0

    async def call() -> bool:
        nonlocal largest
        reservation = budget.reserve(500, 500, FREE)
        if reservation is None:
            return False
        await asyncio.sleep(rng.uniform(0, 0.002))
        overshoot = rng.choice([0, 0, rng.randint(1, 3000)])  # now and then, any size
        largest = max(largest, overshoot)
        budget.settle(reservation, 500, 500 + overshoot, 0.0)
        return True

    async def rounds() -> None:
        while any(await asyncio.gather(*(call() for _ in range(in_flight)))):
            pass

    asyncio.run(rounds())
    usage = budget.usage()
    assert usage.overshoot_tokens > 0 and usage.outstanding == 0
    assert usage.tokens <= limit + in_flight * largest


def test_dollar_overshoot_is_padded_too():
    price = Price(1.0, 1.0)  # USD per million tokens
    budget = Budget(tokens=None, usd=1.0)
    first = budget.reserve(100_000, 100_000, price)  # worst case 0.2 USD
    budget.settle(first, 100_000, 300_000, price.cost_usd(100_000, 300_000))  # 0.4 USD
    assert budget.usage().overshoot_usd == pytest.approx(0.2)
    assert budget.reserve(100_000, 100_000, price).cost_usd == pytest.approx(0.4)


def test_settling_twice_is_a_bug_the_budget_reports():
    budget = Budget(tokens=1000)
    reservation = budget.reserve(10, 10, FREE)
    budget.release(reservation)
    with pytest.raises(ValueError, match="settle each one once"):
        budget.settle(reservation, 1, 1, 0.0)


def test_dollar_limit_uses_the_price():
    budget = Budget(tokens=None, usd=1.0)
    price = Price(1.0, 10.0)  # worst case of (100k in, 50k out) is 0.1 + 0.5 USD
    first = budget.reserve(100_000, 50_000, price)
    assert budget.reserve(100_000, 50_000, price) is None
    budget.settle(first, 100_000, 10_000, price.cost_usd(100_000, 10_000))
    assert budget.usage().cost_usd == pytest.approx(0.2)
    assert budget.reserve(100_000, 50_000, price) is not None


def test_dollar_limit_with_an_unknown_price_is_a_config_error():
    with pytest.raises(ConfigError, match=r"\[llm.prices\]"):
        Budget(usd=1.0).reserve(10, 10, UNKNOWN_PRICE)


def test_candidate_slots_are_held_by_calls_in_flight():
    budget = Budget(candidates=2)
    call = budget.reserve(10, 10, FREE)
    assert budget.count_candidate()  # a tuner candidate takes the other slot
    assert not budget.count_candidate()  # the last slot belongs to the call
    assert budget.reserve(10, 10, FREE) is None
    budget.settle(call, 5, 5, 0.0)
    assert budget.count_candidate()
    assert budget.exhausted() == "candidate budget spent: 2 of 2 candidates"


def test_wall_time_uses_the_injected_clock():
    clock = FakeClock()
    budget = Budget(wall_s=60, clock=clock)
    assert budget.reserve(1, 1, FREE, max_duration_s=30) is not None
    clock.now_s += 45
    assert budget.exhausted() is None
    assert budget.reserve(1, 1, FREE, max_duration_s=30) is None  # could run past the end
    clock.now_s += 15
    assert "time budget spent: 60 of 60 s" in budget.exhausted()
    assert budget.reserve(1, 1, FREE) is None


def test_exhausted_names_the_limit_and_the_flag():
    budget = Budget(tokens=100)
    budget.settle(budget.reserve(50, 50, FREE), 60, 40, 0.0)
    assert budget.exhausted() == "token budget spent: 100 of 100 tokens (raise --tokens)"


def test_restore_counts_what_a_resumed_run_spent():
    clock = FakeClock()
    budget = Budget(tokens=1000, wall_s=100, clock=clock)
    budget.restore(tokens=900, cost_usd=0.5, candidates=3, elapsed_s=99.0)
    assert budget.reserve(60, 60, FREE) is None
    assert budget.usage().candidates == 3
    clock.now_s += 1
    assert budget.exhausted().startswith("time budget spent")


def test_budget_exhausted_pickles():
    error = pickle.loads(pickle.dumps(BudgetExhausted("no LLM call issued: token budget spent")))
    assert str(error) == "no LLM call issued: token budget spent"


@pytest.mark.parametrize(
    "limits", [{"tokens": -1}, {"usd": -0.5}, {"candidates": -3}, {"wall_s": -1}]
)
def test_negative_limits_are_config_errors(limits):
    with pytest.raises(ConfigError, match=">= 0"):
        Budget(**limits)


def test_concurrent_tasks_never_overrun():
    limit_tokens, limit_usd = 5_000, 0.004
    price = Price(0.5, 1.0)
    budget = Budget(tokens=limit_tokens, usd=limit_usd)
    rng = random.Random(3)
    peaks: list[int] = []

    async def call(index: int) -> bool:
        reservation = budget.reserve(400, 600, price)
        if reservation is None:
            return False
        await asyncio.sleep(rng.uniform(0, 0.01))
        used_in, used_out = rng.randint(100, 400), rng.randint(0, 600)
        budget.settle(reservation, used_in, used_out, price.cost_usd(used_in, used_out))
        usage = budget.usage()
        peaks.append(usage.tokens + usage.reserved_tokens)
        return True

    async def rounds() -> list[bool]:
        results: list[bool] = []
        for _ in range(5):  # later rounds reuse what earlier calls did not spend
            results += await asyncio.gather(*(call(i) for i in range(20)))
        return results

    results = asyncio.run(rounds())
    usage = budget.usage()
    assert 0 < sum(results) < len(results)
    assert usage.tokens <= limit_tokens and usage.cost_usd <= limit_usd
    assert max(peaks) <= limit_tokens and usage.outstanding == 0


def test_threads_never_overrun():
    budget = Budget(tokens=10_000)
    admitted = []

    def worker() -> None:
        for _ in range(200):
            reservation = budget.reserve(60, 40, FREE)
            if reservation is not None:
                admitted.append(reservation)
                budget.settle(reservation, 60, 40, 0.0)

    threads = [threading.Thread(target=worker) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 100 and budget.usage().tokens == 10_000


@pytest.mark.parametrize(
    "text, tokens",
    [("1M", 1_000_000), ("1m", 1_000_000), ("250k", 250_000), ("250K", 250_000),
     ("1.5M", 1_500_000), ("1_000_000", 1_000_000), ("2,000", 2000), (" 42 ", 42), ("1G", 10**9)],
)
def test_parse_tokens(text, tokens):
    assert parse_tokens(text) == tokens


@pytest.mark.parametrize(
    "text, seconds",
    [("2h", 7200), ("90m", 5400), ("90min", 5400), ("30s", 30), ("1h30m", 5400),
     ("1.5h", 5400), ("45", 45), ("1d", 86400), ("2H", 7200)],
)
def test_parse_duration(text, seconds):
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text, usd", [("2", 2.0), ("$0.50", 0.5), ("3 USD", 3.0), (".25", 0.25)])
def test_parse_usd(text, usd):
    assert parse_usd(text) == usd


@pytest.mark.parametrize(
    "text, amount",
    [("1M", 1_000_000), ("250k", 250_000), ("2h", 7200), ("90m", 5400), ("30s", 30), ("$2", 2.0)],
)
def test_parse_amount_reads_the_suffix(text, amount):
    assert parse_amount(text) == amount


def test_parse_amount_with_a_kind():
    assert parse_amount("1m", "tokens") == 1_000_000
    assert parse_amount("1m", "duration") == 60
    with pytest.raises(ValueError, match="unknown amount kind 'bytes'"):
        parse_amount("1", "bytes")


@pytest.mark.parametrize(
    "parse, text, hint",
    [(parse_tokens, "lots", "1M, 250k"), (parse_tokens, "1.5", "whole number"),
     (parse_tokens, "-5k", "1M"), (parse_duration_s, "2 hours", "2h, 90m"),
     (parse_duration_s, "", "2h"), (parse_usd, "two dollars", "2 or 0.50")],
)
def test_bad_amounts_show_the_value_and_an_example(parse, text, hint):
    with pytest.raises(ConfigError) as caught:
        parse(text)
    assert repr(text) in str(caught.value) and hint in str(caught.value)
