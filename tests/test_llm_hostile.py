"""Flaky and hostile LLM servers: 429 for ever, lies about usage, nothing answered, calls cut off.

Each server is the fake one on a real socket; the charge rules are those of
llm/charges.py, checked from the budget and from the run store alike.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from kernelevo.budget import Budget
from kernelevo.errors import LLMError, LLMRequestError, LLMUnavailable
from kernelevo.llm import ClientConfig, ModelPool, PriceTable, input_token_bound
from kernelevo.llm.breaker import CircuitBreaker
from kernelevo.llm.charges import CUT_OFF_NOTE, NO_USAGE_NOTE
from tests.fakes import QUOTA_SPENT, Delay, Drop, FakeOpenAIServer, Reply, Status
from tests.fakes.openai_server import closed_port_url
from tests.test_llm_faults import FAST, KEY_ENV, MESSAGES, ask, client, finish, make_run

MAX_TOKENS = 64
WORST = input_token_bound(MESSAGES) + MAX_TOKENS
PRICES = PriceTable.with_overrides({"fake-model": [1.0, 2.0]})  # USD per million


@pytest.fixture(autouse=True)
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def pool_call(base_url: str, budget: Budget, **settings):
    """One call through a pool that keeps `budget`: its Completion or the error it raised."""
    async def call():
        config = ClientConfig(base_url=base_url, model="fake-model", **{**FAST, **settings})
        pool = ModelPool.from_models(config, {"fake-model": 1.0}, budget=budget, prices=PRICES)
        try:
            return await pool.complete(MESSAGES, max_tokens=MAX_TOKENS)
        except LLMError as exc:
            return exc
        finally:
            await pool.aclose()

    return asyncio.run(call())


# -- 429 -------------------------------------------------------------------------------


def test_a_429_for_ever_opens_the_breaker_instead_of_looping():
    with FakeOpenAIServer(default=Status(429)) as server:
        results = ask(client(server.base_url, max_attempts=2, breaker_failures=3), times=3)
        requests = len(server.requests)
    assert type(results[0]) is LLMError  # two attempts, the breaker not yet open
    assert isinstance(results[1], LLMUnavailable) and results[1].fatal
    assert "3 attempts in a row" in str(results[1]) and "HTTP 429" in str(results[1])
    assert isinstance(results[2], LLMUnavailable) and results[2].attempts == ()
    assert requests == 3


def test_a_429_for_ever_waits_as_its_retry_after_asks():
    with FakeOpenAIServer(default=Status(429, retry_after="0.3")) as server:
        (error,) = ask(client(server.base_url, retry_after_max_s=1.0, max_attempts=3))
        gaps = server.gaps_s()
    assert type(error) is LLMError and len(error.attempts) == 3
    assert len(gaps) == 2 and min(gaps) >= 0.28


def test_a_retry_after_holds_every_call_to_the_endpoint():
    async def two_calls(llm):
        first = asyncio.create_task(llm.complete(MESSAGES, max_tokens=MAX_TOKENS))
        await asyncio.sleep(0.15)  # the first call's 429 has come back by now
        second = await llm.complete(MESSAGES, max_tokens=MAX_TOKENS)
        first_result = await first  # both calls done before the client closes under them
        await llm.aclose()
        return first_result, second

    with FakeOpenAIServer([Status(429, retry_after="0.6"), "a", "b"]) as server:
        first, second = asyncio.run(two_calls(client(server.base_url, retry_after_max_s=2.0)))
        gaps = server.gaps_s()
    assert {first.text, second.text} == {"a", "b"}
    # The second call sent nothing until the wait the first call was asked for was over.
    assert len(gaps) == 2 and gaps[0] >= 0.55


def test_a_spent_quota_ends_the_call_at_once_saying_to_add_credit():
    with FakeOpenAIServer(default=QUOTA_SPENT) as server:
        (error,) = ask(client(server.base_url))
        requests = len(server.requests)
    assert isinstance(error, LLMRequestError) and error.fatal and error.status_code == 429
    assert "no quota or credit left" in str(error) and "exceeded your current quota" in str(error)
    assert requests == 1


def test_a_run_against_a_429_for_ever_ends_llm_failed_and_costs_nothing(tmp_path):
    budget = Budget(tokens=200_000)
    with FakeOpenAIServer(default=Status(429)) as server:
        evolution, store, pool = make_run(tmp_path, server.base_url, budget=budget,
                                          max_attempts=2, breaker_failures=4)
        started_s = time.monotonic()
        outcome = finish(evolution, pool)
        requests = len(server.requests)
    assert outcome.status == "llm_failed" and "HTTP 429" in outcome.reason
    assert requests <= 6 and time.monotonic() - started_s < 20
    assert budget.usage().tokens == 0 and store.totals().tokens_in == 0


# -- no call succeeding for give_up_s ----------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_the_breaker_opens_once_nothing_has_succeeded_for_give_up_s():
    clock = Clock()
    breaker = CircuitBreaker(failures=1000, min_span_s=0.0, give_up_s=10.0, clock=clock)
    for now_s in (0.0, 4.0, 9.9):
        clock.now_s = now_s
        assert not breaker.failed("http://x/v1", "HTTP 429", now_s)
        breaker.answered()  # a refusal in between is no success
    clock.now_s = 10.0
    assert breaker.failed("http://x/v1", "HTTP 429", 10.0) and breaker.open
    with pytest.raises(LLMUnavailable, match=r"has succeeded for 10 s .*give_up_s"):
        breaker.check()


def test_a_success_restarts_the_give_up_clock_at_the_next_failure():
    clock = Clock()
    breaker = CircuitBreaker(failures=1000, min_span_s=0.0, give_up_s=10.0, clock=clock)
    assert not breaker.failed("http://x/v1", "HTTP 500", 0.0)
    clock.now_s = 8.0
    breaker.succeeded()
    for now_s in (9.0, 18.9):  # failing since 9 s: not yet for 10 s
        clock.now_s = now_s
        assert not breaker.failed("http://x/v1", "HTTP 500", now_s)
    clock.now_s = 19.0
    assert breaker.failed("http://x/v1", "HTTP 500", 19.0)


def test_a_run_where_no_call_succeeds_for_give_up_s_ends_llm_failed(tmp_path):
    # The count rule is out of reach (1000 failures): only the time rule can end it.
    with FakeOpenAIServer(default=500) as server:
        evolution, store, pool = make_run(tmp_path, server.base_url, timeout_s=0.5,
                                          give_up_s=1.0)
        started_s = time.monotonic()
        outcome = finish(evolution, pool)
    assert outcome.status == "llm_failed" and "give_up_s" in outcome.reason
    assert time.monotonic() - started_s < 15


def test_give_up_s_below_timeout_s_is_refused_naming_both():
    with pytest.raises(Exception, match=r"give_up_s \(10 s\) is below timeout_s \(300 s\)"):
        ClientConfig(base_url="http://x/v1", model="m", give_up_s=10.0)


# -- usage the server reports ------------------------------------------------------------


@pytest.mark.parametrize("reply", [
    Reply("x", prompt_tokens=-570_000, completion_tokens=10),
    Reply("x", prompt_tokens=10, completion_tokens=-1),
    Reply("x", prompt_tokens=10**12, completion_tokens=10**12),
    Reply("x", prompt_tokens=10, completion_tokens=MAX_TOKENS + 1),
], ids=["negative input", "negative output", "huge", "above max_tokens"])
def test_usage_no_call_could_have_used_is_charged_the_worst_case_and_flagged(reply):
    budget = Budget(tokens=100_000, usd=10.0)
    with FakeOpenAIServer([reply]) as server:
        completion = pool_call(server.base_url, budget)
    assert (completion.input_tokens, completion.output_tokens) == (WORST - MAX_TOKENS, MAX_TOKENS)
    assert "outside what the call could use" in completion.usage_note
    usage = budget.usage()
    assert usage.tokens == WORST and 0 < usage.cost_usd < 0.01 and usage.overshoot_tokens == 0


def test_usage_within_the_calls_bounds_is_charged_as_reported():
    budget = Budget(tokens=100_000)
    with FakeOpenAIServer([Reply("x", prompt_tokens=7, completion_tokens=5)]) as server:
        completion = pool_call(server.base_url, budget)
    assert (completion.input_tokens, completion.output_tokens, completion.usage_note) == (7, 5, "")
    assert budget.usage().tokens == 12


def test_an_answer_without_usage_is_an_estimate_said_so():
    budget = Budget(tokens=100_000)
    with FakeOpenAIServer([Reply("four", include_usage=False)]) as server:
        completion = pool_call(server.base_url, budget)
    assert completion.estimated and completion.usage_note == NO_USAGE_NOTE
    assert budget.usage().tokens == completion.total_tokens <= WORST


def test_a_lying_server_cannot_drive_a_run_below_zero_or_past_its_budget(tmp_path):
    budget = Budget(tokens=60_000)
    liar = Reply("no code in this answer", prompt_tokens=-570_000, completion_tokens=10**12)
    with FakeOpenAIServer(default=liar) as server:
        evolution, store, pool = make_run(tmp_path, server.base_url, budget=budget)
        outcome = finish(evolution, pool)
    totals = store.totals()
    assert outcome.status == "budget_spent"
    assert 0 < budget.usage().tokens <= 60_000
    assert totals.tokens_in + totals.tokens_out == budget.usage().tokens
    assert totals.estimated_tokens == budget.usage().tokens and totals.billed_tokens == 0
    flags = store.events("llm_usage_flagged")
    assert len(flags) == len(store.llm_calls()) > 0


# -- calls that never reach the server, or get no answer -----------------------------------


def test_a_refused_connection_costs_nothing():
    budget = Budget(tokens=100_000)
    error = pool_call(closed_port_url(), budget, max_attempts=3)
    assert isinstance(error, LLMError) and budget.usage().tokens == 0


def test_500_for_ever_costs_nothing():
    budget = Budget(tokens=100_000)
    with FakeOpenAIServer(default=500) as server:
        error = pool_call(server.base_url, budget, max_attempts=3)
    assert isinstance(error, LLMError) and budget.usage().tokens == 0


@pytest.mark.parametrize("step", [Delay(30.0, "too late"), Drop()], ids=["timeout", "dropped"])
def test_a_request_sent_and_never_answered_is_charged_its_worst_case_once(step):
    budget = Budget(tokens=100_000)
    with FakeOpenAIServer(default=step) as server:
        error = pool_call(server.base_url, budget, max_attempts=2, timeout_s=0.3)
    assert isinstance(error, LLMError) and len(error.attempts) == 2
    assert budget.usage().tokens == WORST  # once per call, not per attempt


def test_an_answer_after_a_timed_out_request_is_charged_the_worst_case():
    budget = Budget(tokens=100_000)
    script = [Delay(30.0, "too late"), Reply("x", prompt_tokens=7, completion_tokens=5)]
    with FakeOpenAIServer(script) as server:
        completion = pool_call(server.base_url, budget, timeout_s=0.3)
    assert completion.text == "x" and completion.usage_note == CUT_OFF_NOTE
    assert budget.usage().tokens == WORST


def test_a_call_cancelled_while_it_waits_to_retry_costs_nothing():
    budget = Budget(tokens=100_000)

    async def cut_off(base_url: str) -> None:
        config = ClientConfig(base_url=base_url, model="fake-model",
                              **{**FAST, "retry_after_max_s": 30.0})
        pool = ModelPool.from_models(config, {"fake-model": 1.0}, budget=budget)
        try:
            await asyncio.wait_for(pool.complete(MESSAGES, max_tokens=MAX_TOKENS), 0.5)
        finally:
            await pool.aclose()

    with FakeOpenAIServer(default=Status(503, retry_after="20")) as server:
        with pytest.raises(asyncio.TimeoutError):
            asyncio.run(cut_off(server.base_url))
        requests = len(server.requests)
    assert requests == 1 and budget.usage().tokens == 0 and budget.usage().outstanding == 0


def test_a_run_against_a_dead_endpoint_charges_nothing(tmp_path):
    budget = Budget(tokens=200_000)
    evolution, store, pool = make_run(tmp_path, closed_port_url(), budget=budget,
                                      max_attempts=2, breaker_failures=3)
    outcome = finish(evolution, pool)
    totals = store.totals()
    assert outcome.status == "llm_failed"
    assert budget.usage().tokens == 0 and totals.tokens_in + totals.tokens_out == 0
    assert {call.state for call in store.llm_calls()} == {"failed"}
