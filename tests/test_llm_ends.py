"""LLM calls end on their own, and a call that brought nothing back is a failure, never a success.

Against a real local HTTP server: one that takes a request and never
answers ends a call at `idle_timeout_s`; one that answers a byte at a time,
each within the idle limit, ends it at `timeout_s`; an answer with no content
is a failed call, charged the usage the server reported. A run whose every
LLM call failed ends `llm_failed` and says so, whatever seeds and the tuner did.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
import time

import pytest
from rich.console import Console

from kernelevo.budget import Budget
from kernelevo.cli.evolve import progress_table
from kernelevo.errors import LLMEmptyAnswer, LLMError, LLMUnavailable
from kernelevo.llm import ClientConfig, ModelPool, OpenAICompatClient
from kernelevo.search.outcome import Progress
from tests.fakes import FakeOpenAIServer, Hang, Reply, Status, Trickle
from tests.test_llm_faults import FAST, MESSAGES, finish, kinds, make_run

IDLE_S = 0.4  # the tests' idle limit, where the default waits 60 s


@pytest.fixture(scope="module", autouse=True)
def warm_http() -> None:
    """A process's first request imports httpx's backends: keep that out of short limits."""
    with FakeOpenAIServer(["warm"]) as server:
        ask(client(server.base_url))


def client(base_url: str, **settings) -> OpenAICompatClient:
    return OpenAICompatClient(ClientConfig(base_url=base_url, model="fake-model",
                                           **{**FAST, "idle_timeout_s": IDLE_S, **settings}))


def ask(llm, max_tokens: int = 64):
    """One call's Completion or the LLMError it raised, and how long it took in seconds."""
    async def call():
        started = time.monotonic()
        try:
            return await llm.complete(MESSAGES, max_tokens=max_tokens), time.monotonic() - started
        except LLMError as exc:
            return exc, time.monotonic() - started
        finally:
            await llm.aclose()

    return asyncio.run(call())


def test_the_idle_limit_is_a_setting_of_its_own_defaulting_to_a_minute():
    config = ClientConfig(base_url="http://x/v1", model="m")
    assert (config.idle_timeout_s, config.timeout_s) == (60.0, 300.0)
    with pytest.raises(Exception, match="idle_timeout_s"):
        ClientConfig(base_url="http://x/v1", model="m", idle_timeout_s=0)


def test_a_server_that_never_answers_ends_the_call_at_the_idle_limit():
    with FakeOpenAIServer(default=Hang()) as server:
        error, took_s = ask(client(server.base_url, timeout_s=30.0, max_attempts=2))
    assert isinstance(error, LLMError) and not isinstance(error, LLMEmptyAnswer)
    assert kinds(error.attempts) == ["timeout", "timeout"]
    assert f"no byte from the server for idle_timeout_s={IDLE_S:g} s" in str(error)
    assert took_s < 10  # two idle limits and a backoff, far from the 30 s deadline


def test_a_server_sending_a_byte_at_a_time_ends_the_call_at_its_deadline():
    # A byte every 0.1 s never trips the 0.4 s idle limit; the answer would take minutes.
    with FakeOpenAIServer(default=Trickle(0.1, "x" * 200)) as server:
        error, took_s = ask(client(server.base_url, timeout_s=1.5, max_attempts=1))
    assert isinstance(error, LLMError) and kinds(error.attempts) == ["timeout"]
    assert "no answer within timeout_s=1.5 s" in str(error)
    assert 1.4 < took_s < 5


def test_a_trickled_answer_within_the_deadline_is_an_answer():
    """The same trickle, short enough: the limits end slow calls, not slow but live ones."""
    with FakeOpenAIServer([Trickle(0.002, "kernel")]) as server:
        completion, _ = ask(client(server.base_url, timeout_s=10.0, max_attempts=1))
    assert completion.text == "kernel"


@pytest.mark.parametrize("server_step", [Hang(), Trickle(0.1, "x" * 200)])
def test_both_kinds_of_silence_count_toward_the_circuit_breaker(server_step):
    with FakeOpenAIServer(default=server_step) as server:
        llm = client(server.base_url, timeout_s=1.0, max_attempts=5, breaker_failures=2,
                     breaker_min_s=0.0)
        error, _ = ask(llm)
    assert isinstance(error, LLMUnavailable), error
    assert kinds(error.attempts) == ["timeout", "timeout"] and llm.breaker.open


@pytest.mark.parametrize("content", ["", None, "  \n"])
def test_an_empty_answer_is_a_failed_call_not_retried(content):
    with FakeOpenAIServer([Reply(content, finish_reason="length")],
                          default="never asked") as server:
        llm = client(server.base_url)
        error, _ = ask(llm)
        asked = len(server.requests)
    assert isinstance(error, LLMEmptyAnswer) and not error.fatal
    assert kinds(error.attempts) == ["empty"] and asked == 1
    assert "no content (finish_reason length)" in str(error)
    assert "raise max_output_tokens" in str(error)
    assert pickle.loads(pickle.dumps(error)).usage == error.usage


def test_empty_answers_count_toward_the_breaker_and_never_reset_it():
    with FakeOpenAIServer(default=Reply("")) as server:
        llm = client(server.base_url, breaker_failures=2, breaker_min_s=0.0)

        async def two_calls():
            try:
                for _ in range(2):
                    with pytest.raises(LLMEmptyAnswer):
                        await llm.complete(MESSAGES, max_tokens=64)
            finally:
                await llm.aclose()

        asyncio.run(two_calls())
    assert llm.breaker.open


def _pool_call(server: FakeOpenAIServer, budget: Budget) -> LLMError:
    config = ClientConfig(base_url=server.base_url, model="fake-model", **FAST)
    pool = ModelPool.from_models(config, {"fake-model": 1.0}, budget=budget)

    async def call():
        try:
            await pool.complete(MESSAGES, max_tokens=64)
        except LLMError as exc:
            return exc
        finally:
            await pool.aclose()
        raise AssertionError("an empty answer was taken as an answer")

    return asyncio.run(call())


def test_an_empty_answer_is_charged_the_usage_the_server_reported():
    budget = Budget()
    with FakeOpenAIServer([Reply("", prompt_tokens=12, completion_tokens=40)]) as server:
        error = _pool_call(server, budget)
    assert isinstance(error, LLMEmptyAnswer) and error.usage[:2] == (12, 40)
    assert budget.usage().tokens == 52


def test_an_empty_answer_without_usage_is_charged_nothing():
    budget = Budget()
    with FakeOpenAIServer([Reply(None, include_usage=False)]) as server:
        error = _pool_call(server, budget)
    assert isinstance(error, LLMEmptyAnswer) and error.usage is None
    assert budget.usage().tokens == 0


# -- whole runs ----------------------------------------------------------------------


def test_a_run_of_empty_answers_ends_llm_failed_with_billed_tokens_not_estimates(tmp_path):
    with FakeOpenAIServer(default=Reply("", prompt_tokens=30, completion_tokens=5)) as server:
        evolution, store, pool = make_run(tmp_path, server.base_url, max_attempts=1,
                                          budget=Budget(wall_s=2.0))
        outcome = finish(evolution, pool)
    failed = store.llm_calls("failed")
    assert outcome.status == "llm_failed", outcome
    assert outcome.reason.startswith(f"the LLM never answered: {len(failed)} calls failed")
    assert "no content" in outcome.reason
    assert failed and not store.llm_calls("finished")
    assert all((call.input_tokens, call.output_tokens) == (30, 5) for call in failed)
    totals = store.totals()
    assert totals.tokens_in + totals.tokens_out == 35 * len(failed)
    assert totals.estimated_tokens == 0  # the server reported them: billed


def test_a_run_whose_llm_never_answered_fails_though_seeds_and_tuner_spent_the_budget(tmp_path):
    with FakeOpenAIServer(default=Status(500)) as server:
        # The seed passes and the tuner adds variants of it while every LLM call fails.
        evolution, store, pool = make_run(tmp_path, server.base_url, max_attempts=1,
                                          budget=Budget(candidates=4, wall_s=2.5))
        evolution.config = dataclasses.replace(evolution.config, tuner_variants=3)
        outcome = finish(evolution, pool)
    origins = evolution.progress.by_origin
    assert origins.get("tuner", 0) == 3 and origins["seed"] == 1, origins
    assert outcome.status == "llm_failed" and outcome.failed
    assert outcome.reason.startswith("the LLM never answered: ") and "HTTP 500" in outcome.reason
    (stop,) = store.events("stop")
    assert stop.payload["status"] == "llm_failed"


def test_the_end_of_run_table_marks_estimates_and_says_what_the_count_includes():
    progress = Progress(by_status={"ok": 6}, tokens=1_500, estimated_tokens=400, cost_usd=0.01,
                        by_origin={"seed": 1, "tuner": 3, "llm": 1, "repair": 1})
    console = Console(width=200, record=True)
    console.print(progress_table(progress, "run-1", "LLM + tuner"))
    text = console.export_text()
    assert "1,500 (400 est.) / $0.0100" in text
    assert "6: 1 seeds, 3 tuner, 2 LLM" in text
    assert "(400 est.)" not in _table_text(Progress(tokens=1_500))


def _table_text(progress: Progress) -> str:
    console = Console(width=200, record=True)
    console.print(progress_table(progress, "run-1", "LLM + tuner"))
    return console.export_text()
