"""The OpenAI-compatible client and the model pool, against a real local HTTP server."""

from __future__ import annotations

import asyncio
import email.utils
import math
import pickle
import time
from collections import Counter

import pytest

from kernelevo.budget import Budget
from kernelevo.errors import BudgetExhausted
from kernelevo.llm import (
    ClientConfig,
    Completion,
    LLMClient,
    LLMError,
    LLMUnavailable,
    ModelPool,
    OpenAICompatClient,
    PoolMember,
    Price,
    PriceTable,
    input_token_bound,
)
from tests.fakes import Delay, Drop, FakeOpenAIServer, Malformed, Reply, Status

KEY_ENV = "KERNELEVO_TEST_KEY"
# Short delays keep the suite fast while still exercising the real retry paths.
FAST = {
    "api_key_env": KEY_ENV,
    "backoff_base_s": 0.01,
    "backoff_max_s": 0.05,
    "retry_after_max_s": 0.05,
    "timeout_s": 2.0,
    "max_attempts": 4,
}
MESSAGES = [{"role": "user", "content": "write a kernel"}]


@pytest.fixture(autouse=True)
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture(scope="module", autouse=True)
def warm_http() -> None:
    """One call first: a process's first request imports httpx's backends, which can take
    longer than the short timeouts below on a loaded machine."""
    with FakeOpenAIServer(["warm"]) as server:
        ask(make_client(server))


def make_client(
    server: FakeOpenAIServer, model: str = "fake-model", **settings
) -> OpenAICompatClient:
    config = ClientConfig(base_url=server.base_url, model=model, **{**FAST, **settings})
    return OpenAICompatClient(config)


def ask(client: LLMClient, messages: list[dict] = MESSAGES, max_tokens: int = 64) -> Completion:
    async def call() -> Completion:
        try:
            return await client.complete(messages, max_tokens=max_tokens)
        finally:
            await client.aclose()

    return asyncio.run(call())


def test_success_reports_text_usage_and_sends_openai_request(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    script = [Reply("hello", prompt_tokens=11, completion_tokens=7)]
    with FakeOpenAIServer(script, api_key="sk-test") as server:
        completion = ask(make_client(server, temperature=0.3), max_tokens=99)
    assert (completion.text, completion.model) == ("hello", "fake-model")
    assert (completion.input_tokens, completion.output_tokens) == (11, 7)
    assert completion.total_tokens == 18
    assert completion.attempts == 1 and not completion.estimated
    assert completion.finish_reason == "stop" and completion.latency_s > 0
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.body == {
        "model": "fake-model", "messages": MESSAGES, "max_tokens": 99, "temperature": 0.3
    }
    assert request.headers["Authorization"] == "Bearer sk-test"


def test_key_is_read_at_call_time(monkeypatch):
    with FakeOpenAIServer(["ok"], api_key="sk-late") as server:
        client = make_client(server)
        monkeypatch.setenv(KEY_ENV, "sk-late")
        assert ask(client).text == "ok"


def test_without_a_key_no_authorization_is_sent():
    with FakeOpenAIServer(["ok"]) as server:
        assert ask(make_client(server)).text == "ok"
    assert "Authorization" not in server.requests[0].headers


def test_429_waits_as_long_as_retry_after_says():
    with FakeOpenAIServer([Status(429, retry_after="0.2"), "ok"]) as server:
        completion = ask(make_client(server, retry_after_max_s=5.0))
    first, second = server.requests
    assert completion.text == "ok" and completion.attempts == 2
    assert second.received_at_s - first.received_at_s >= 0.2


def test_a_retry_after_in_the_past_is_no_wait():
    past = email.utils.formatdate(time.time() - 60, usegmt=True)
    started_s = time.monotonic()
    with FakeOpenAIServer([Status(429, retry_after=past), "ok"]) as server:
        completion = ask(make_client(server))
    assert completion.attempts == 2
    assert time.monotonic() - started_s < 2.0


def test_a_retry_after_longer_than_the_config_allows_ends_the_call_saying_so():
    started_s = time.monotonic()
    with FakeOpenAIServer([Status(429, retry_after="30")], default="never") as server:
        client = make_client(server)
        with pytest.raises(LLMUnavailable) as raised:
            ask(client)
    error = raised.value
    assert error.fatal and "30 s (Retry-After)" in str(error)
    assert "retry_after_max_s = 0.05" in str(error)
    assert len(server.requests) == 1 and client.breaker.open
    assert time.monotonic() - started_s < 2.0


@pytest.mark.parametrize("code", [500, 502, 503])
def test_server_errors_are_retried(code):
    with FakeOpenAIServer([Status(code), code, "recovered"]) as server:
        completion = ask(make_client(server))
    assert (completion.text, completion.attempts) == ("recovered", 3)
    assert len(server.requests) == 3


def test_dropped_connection_is_retried():
    with FakeOpenAIServer([Drop(), Drop(), "after drops"]) as server:
        completion = ask(make_client(server))
    assert (completion.text, completion.attempts) == ("after drops", 3)


def test_malformed_answers_are_retried():
    script = [Malformed(), Malformed('{"error": {"message": "upstream failed"}}'), "fine"]
    with FakeOpenAIServer(script) as server:
        completion = ask(make_client(server))
    assert (completion.text, completion.attempts) == ("fine", 3)


def test_slow_answer_times_out_and_is_retried():
    started_s = time.monotonic()
    with FakeOpenAIServer([Delay(3.0, "too late"), "in time"]) as server:
        completion = ask(make_client(server, timeout_s=0.2))
    assert (completion.text, completion.attempts) == ("in time", 2)
    assert time.monotonic() - started_s < 2.0


def test_timeouts_until_attempts_run_out_raise_llm_error():
    with FakeOpenAIServer(default=Delay(3.0, "too late")) as server:
        with pytest.raises(LLMError) as caught:
            ask(make_client(server, timeout_s=0.15, max_attempts=2))
    message = str(caught.value)
    assert "2 attempts" in message and "timeout_s=0.15" in message
    # Counted at the client: on a loaded machine the server's thread may not have
    # logged a request the client already gave up on.
    assert [a.kind for a in caught.value.attempts] == ["timeout", "timeout"]
    assert not caught.value.fatal


def test_exhausted_retries_name_the_last_failure():
    with FakeOpenAIServer(default=Status(503)) as server:
        with pytest.raises(LLMError, match="HTTP 503") as caught:
            ask(make_client(server, max_attempts=3))
    assert len(server.requests) == 3
    assert "max_attempts" in str(caught.value)


def test_refused_key_is_not_retried_and_names_the_env_var(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-wrong-secret")
    with FakeOpenAIServer(["never sent"], api_key="sk-right") as server:
        with pytest.raises(LLMError) as caught:
            ask(make_client(server))
    message = str(caught.value)
    assert caught.value.status_code == 401
    assert KEY_ENV in message and "refused" in message
    assert "sk-wrong-secret" not in message
    assert len(server.requests) == 1


def test_missing_key_says_the_env_var_is_not_set():
    with FakeOpenAIServer(api_key="sk-right") as server:
        with pytest.raises(LLMError, match=f"{KEY_ENV} is not set"):
            ask(make_client(server))


def test_bad_request_is_not_retried_and_shows_the_server_message():
    with FakeOpenAIServer([Status(400, message="max_tokens is too large")]) as server:
        with pytest.raises(LLMError, match="max_tokens is too large") as caught:
            ask(make_client(server))
    assert caught.value.status_code == 400
    assert len(server.requests) == 1


def test_wrong_path_says_to_check_base_url():
    with FakeOpenAIServer(["unused"]) as server:
        config = ClientConfig(base_url=server.base_url + "/wrong", model="m", **FAST)
        with pytest.raises(LLMError, match="check base_url") as caught:
            ask(OpenAICompatClient(config))
    assert caught.value.status_code == 404


def test_llm_error_pickles_with_its_status():
    error = pickle.loads(pickle.dumps(LLMError("HTTP 401: set X", 401)))
    assert (str(error), error.status_code) == ("HTTP 401: set X", 401)


def test_missing_usage_is_estimated_from_characters():
    messages = [{"role": "user", "content": "x" * 10}]
    with FakeOpenAIServer([Reply("y" * 9, include_usage=False)]) as server:
        completion = ask(make_client(server), messages=messages)
    assert completion.estimated
    assert completion.input_tokens == math.ceil(10 / 4)
    assert completion.output_tokens == math.ceil(9 / 4)


def test_cost_comes_from_the_price_table():
    with FakeOpenAIServer([Reply("x", prompt_tokens=1000, completion_tokens=2000)]) as server:
        completion = ask(make_client(server, model="gpt-4o-mini-2024-07-18"))
    assert completion.cost_usd == pytest.approx((1000 * 0.15 + 2000 * 0.60) / 1e6)


def test_unknown_model_costs_nothing():
    with FakeOpenAIServer([Reply("x", prompt_tokens=1000, completion_tokens=2000)]) as server:
        client = make_client(server, model="my-local-model")
        completion = ask(client)
    assert completion.cost_usd == 0.0 and not client.price.known


class _NamedClient:
    """An in-process LLMClient for tests that need no sockets."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def complete(self, messages: list[dict], *, max_tokens: int) -> Completion:
        return Completion("", self.name, 1, 1, 0.0, 0.0, 1)


def test_pool_picks_models_in_proportion_to_weights():
    weights = {"small": 1.0, "medium": 2.0, "large": 7.0}
    members = [PoolMember(name, _NamedClient(name), weight) for name, weight in weights.items()]
    pool = ModelPool(members, seed=7)
    picks = Counter(pool.pick().name for _ in range(20_000))
    for name, weight in weights.items():
        assert picks[name] / 20_000 == pytest.approx(weight / 10, abs=0.015)
    first, second = ModelPool(members, seed=7), ModelPool(members, seed=7)
    assert [first.pick().name for _ in range(50)] == [second.pick().name for _ in range(50)]


def test_pool_sends_each_call_to_the_chosen_model():
    async def run(server: FakeOpenAIServer) -> list[Completion]:
        base = ClientConfig(base_url=server.base_url, model="unused", **FAST)
        pool = ModelPool.from_models(base, {"a": 3.0, "b": 1.0}, seed=1)
        try:
            return [await pool.complete(MESSAGES, max_tokens=8) for _ in range(40)]
        finally:
            await pool.aclose()

    with FakeOpenAIServer(default=lambda request: f"from {request['model']}") as server:
        completions = asyncio.run(run(server))
    assert [c.text for c in completions] == [f"from {c.model}" for c in completions]
    counts = Counter(c.model for c in completions)
    assert counts["a"] > counts["b"] > 0


def test_pool_caps_requests_in_flight():
    async def run(server: FakeOpenAIServer) -> None:
        pool = ModelPool.from_models(
            ClientConfig(base_url=server.base_url, model="m", **FAST), {"m": 1.0}, max_in_flight=3
        )
        try:
            await asyncio.gather(*(pool.complete(MESSAGES, max_tokens=8) for _ in range(12)))
        finally:
            await pool.aclose()

    with FakeOpenAIServer(default=Delay(0.1, "ok")) as server:
        asyncio.run(run(server))
    assert len(server.requests) == 12
    assert server.max_in_flight == 3


def test_pool_never_overruns_the_token_budget_under_concurrency():
    worst_case = input_token_bound(MESSAGES) + 75
    budget = Budget(tokens=10 * worst_case)

    async def run(server: FakeOpenAIServer) -> list:
        pool = ModelPool.from_models(
            ClientConfig(base_url=server.base_url, model="m", **FAST), {"m": 1.0},
            max_in_flight=20, budget=budget,
        )
        try:
            calls = (pool.complete(MESSAGES, max_tokens=75) for _ in range(20))
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await pool.aclose()

    answer = Reply("ok", prompt_tokens=10, completion_tokens=worst_case - 10)
    with FakeOpenAIServer(default=Delay(0.05, answer)) as server:
        results = asyncio.run(run(server))
    done = [r for r in results if isinstance(r, Completion)]
    refused = [r for r in results if isinstance(r, BudgetExhausted)]
    assert (len(done), len(refused)) == (10, 10)
    assert len(server.requests) == 10  # refused calls never reach the endpoint
    usage = budget.usage()
    assert usage.tokens == 10 * worst_case and usage.outstanding == 0
    # The other ten waited for the first ten to settle, then found the budget spent.
    assert "token budget spent" in str(refused[0])


def test_pool_waits_for_reservations_to_settle_instead_of_refusing():
    worst_case = input_token_bound(MESSAGES) + 75
    budget = Budget(tokens=10 * worst_case)

    async def run(server: FakeOpenAIServer) -> list:
        pool = ModelPool.from_models(
            ClientConfig(base_url=server.base_url, model="m", **FAST), {"m": 1.0},
            max_in_flight=20, budget=budget,
        )
        try:
            calls = (pool.complete(MESSAGES, max_tokens=75) for _ in range(30))
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await pool.aclose()

    # Each call uses a quarter of its worst case: room frees up as calls settle.
    answer = Reply("ok", prompt_tokens=10, completion_tokens=worst_case // 4 - 10)
    with FakeOpenAIServer(default=Delay(0.05, answer)) as server:
        results = asyncio.run(run(server))
    done = [r for r in results if isinstance(r, Completion)]
    assert len(done) == 30, [r for r in results if not isinstance(r, Completion)]
    assert server.max_in_flight <= 10  # never more worst cases in flight than fit
    usage = budget.usage()
    assert usage.tokens == 30 * (worst_case // 4) <= budget.limits.tokens
    assert usage.outstanding == 0


def test_pool_refuses_at_once_when_no_model_could_ever_fit():
    budget = Budget(tokens=50)  # less than one call's worst case

    async def run() -> None:
        pool = ModelPool([PoolMember("m", _NamedClient("m"), 1.0)], budget=budget)
        await pool.complete(MESSAGES, max_tokens=75)

    with pytest.raises(BudgetExhausted, match="even with no call in flight"):
        asyncio.run(asyncio.wait_for(run(), 5.0))


def test_pool_falls_back_to_a_model_whose_worst_case_fits():
    cheap, dear = Price(1.0, 1.0), Price(100.0, 100.0)
    bound = input_token_bound(MESSAGES)
    budget = Budget(tokens=None, usd=dear.cost_usd(bound, 1000) * 0.5)

    async def run(server: FakeOpenAIServer) -> tuple[list[Completion], list]:
        base = ClientConfig(base_url=server.base_url, model="unused", **FAST)
        pool = ModelPool.from_models(base, {"dear": 1000.0, "cheap": 1.0}, budget=budget,
                                     prices=PriceTable({"dear": dear, "cheap": cheap}))
        starts: list = []
        try:
            return [await pool.complete(MESSAGES, max_tokens=1000, on_start=starts.append)
                    for _ in range(5)], starts
        finally:
            await pool.aclose()

    with FakeOpenAIServer(default=lambda request: Reply(request["model"], 5, 5)) as server:
        completions, starts = asyncio.run(run(server))
    # "dear" is picked almost always, but never fits: every call went to "cheap".
    assert [c.model for c in completions] == ["cheap"] * 5
    assert [s.model for s in starts] == ["cheap"] * 5
    assert starts[0].cost_bound_usd == pytest.approx(cheap.cost_usd(bound, 1000))


def test_pool_releases_the_reservation_of_a_failed_call():
    budget = Budget(tokens=10_000, usd=1.0)

    async def run(server: FakeOpenAIServer) -> None:
        client = OpenAICompatClient(ClientConfig(base_url=server.base_url, model="m", **FAST))
        pool = ModelPool([PoolMember("m", client, 1.0, Price(1.0, 2.0))], budget=budget)
        try:
            await pool.complete(MESSAGES, max_tokens=100)
        finally:
            await pool.aclose()

    with FakeOpenAIServer([Status(400)]) as server:
        with pytest.raises(LLMError):
            asyncio.run(run(server))
    usage = budget.usage()
    assert (usage.tokens, usage.cost_usd, usage.outstanding) == (0, 0.0, 0)
