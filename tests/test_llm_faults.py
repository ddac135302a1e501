"""LLM faults, from one client call up to a whole search run, against a real local HTTP server.

Each fault is scripted at the fake server (or a closed port); runs use the real
pool, proposer, store and loop, with the judge faked at its seam.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import random
import re
import signal
import subprocess
import sys
import time

import pytest

from kernelevo.budget import Budget
from kernelevo.candidate import Candidate
from kernelevo.errors import LLMError, LLMRequestError, LLMUnavailable
from kernelevo.evaluate.verdict import TimingStats, verdict_for
from kernelevo.llm import ClientConfig, ModelPool, OpenAICompatClient, input_token_bound
from kernelevo.llm.protocol import Attempt
from kernelevo.search.config import SearchConfig
from kernelevo.search.loop import Evolution
from kernelevo.search.outcome import RunOutcome
from kernelevo.search.proposals import LLMProposer
from kernelevo.store.run_store import RunStore
from tests.conftest import ROOT
from tests.fakes import Delay, FakeOpenAIServer, Reply, Status
from tests.fakes.openai_server import closed_port_url

KEY_ENV = "KERNELEVO_TEST_KEY"
FAST = {"api_key_env": KEY_ENV, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
        "retry_after_max_s": 0.05, "timeout_s": 2.0, "max_attempts": 4,
        "breaker_failures": 1000, "breaker_min_s": 0.0}
MESSAGES = [{"role": "user", "content": "write a kernel"}]
TASK_SOURCE = (ROOT / "tests/fixtures/tasks/add.py").read_text()
SEED = (ROOT / "tests/fixtures/candidates/honest_add.py").read_text()
REFUSED_MAX_TOKENS = ("Unsupported parameter: 'max_tokens' is not supported with this model. "
                      "Use 'max_completion_tokens' instead.")


@pytest.fixture(autouse=True)
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture(scope="module", autouse=True)
def warm_http() -> None:
    """A process's first request imports httpx's backends: keep that out of short timeouts."""
    with FakeOpenAIServer(["warm"]) as server:
        ask(client(server.base_url))


def client(base_url: str, **settings) -> OpenAICompatClient:
    return OpenAICompatClient(ClientConfig(base_url=base_url, model="fake-model",
                                           **{**FAST, **settings}))


def ask(llm: OpenAICompatClient, times: int = 1) -> list:
    """`times` calls in a row; each result is a Completion or the error it raised."""
    async def calls() -> list:
        results = []
        try:
            for _ in range(times):
                try:
                    results.append(await llm.complete(MESSAGES, max_tokens=64))
                except LLMError as exc:
                    results.append(exc)
        finally:
            await llm.aclose()
        return results

    return asyncio.run(calls())


def kinds(attempts: tuple[Attempt, ...]) -> list[str]:
    return [attempt.kind for attempt in attempts]


# -- one client ----------------------------------------------------------------------


def test_connection_refused_is_retried_then_reported_with_the_endpoint():
    url = closed_port_url()
    (error,) = ask(client(url, max_attempts=3))
    assert isinstance(error, LLMError) and not error.fatal
    assert kinds(error.attempts) == ["connection"] * 3
    assert url in str(error) and "connection failed" in str(error)


def test_transport_failures_across_calls_open_the_breaker():
    url = closed_port_url()
    first, second, third = ask(client(url, max_attempts=3, breaker_failures=4), times=3)
    assert type(first) is LLMError and len(first.attempts) == 3  # retries ran out
    assert isinstance(second, LLMUnavailable) and second.fatal
    assert len(second.attempts) == 1  # the fourth failure in a row opened it
    assert url in str(second) and "4 attempts in a row" in str(second)
    assert "connection failed" in str(second)  # the last error
    assert isinstance(third, LLMUnavailable) and third.attempts == ()  # nothing sent


def test_a_streak_must_also_last_before_the_breaker_opens():
    url = closed_port_url()
    (error,) = ask(client(url, max_attempts=5, breaker_failures=2, breaker_min_s=60.0))
    assert type(error) is LLMError and len(error.attempts) == 5


def test_repeated_500s_then_success_is_a_completion_with_its_attempts():
    with FakeOpenAIServer([500, Status(502), 503, "finally"]) as server:
        (completion,) = ask(client(server.base_url, breaker_failures=4))
    assert completion.text == "finally" and completion.attempts == 4
    assert kinds(completion.attempt_log) == ["retryable_status"] * 3 + ["ok"]
    assert [a.status_code for a in completion.attempt_log] == [500, 502, 503, 200]
    assert all(a.latency_s >= 0 and a.model == "fake-model" for a in completion.attempt_log)


def test_an_answer_resets_the_breaker():
    script = [500, 500, "one", 500, 500, "two", 500, 500, "three"]
    with FakeOpenAIServer(script) as server:
        results = ask(client(server.base_url, breaker_failures=3), times=3)
    assert [r.text for r in results] == ["one", "two", "three"]


def test_a_hanging_server_times_out_and_opens_the_breaker():
    started_s = time.monotonic()
    with FakeOpenAIServer(default=Delay(30.0, "too late")) as server:
        (error,) = ask(client(server.base_url, timeout_s=0.3, breaker_failures=2))
    assert isinstance(error, LLMUnavailable)
    assert kinds(error.attempts) == ["timeout", "timeout"]
    assert "no answer within timeout_s=0.3" in str(error) and server.base_url in str(error)
    assert time.monotonic() - started_s < 5.0


def test_401_is_fatal_at_once_with_the_server_message():
    with FakeOpenAIServer(["never"], api_key="sk-right") as server:
        (error,) = ask(client(server.base_url))
    assert isinstance(error, LLMRequestError) and error.fatal and error.status_code == 401
    assert f"{KEY_ENV} is not set" in str(error) and "Incorrect API key" in str(error)
    assert len(server.requests) == 1 and kinds(error.attempts) == ["refused"]


def test_404_model_not_found_is_fatal_with_the_server_message():
    missing = Status(404, message="The model `gpt-nope` does not exist",
                     error_type="model_not_found")
    with FakeOpenAIServer([missing]) as server:
        (error,) = ask(client(server.base_url))
    assert isinstance(error, LLMRequestError) and error.status_code == 404
    assert "The model `gpt-nope` does not exist" in str(error)
    assert "model name" in str(error) and len(server.requests) == 1


def reasoning_model(request: dict):
    """Refuses max_tokens the way OpenAI's reasoning models do."""
    if "max_tokens" in request:
        return Status(400, message=REFUSED_MAX_TOKENS, error_type="unsupported_parameter")
    return f"limit {request['max_completion_tokens']}"


def test_a_refused_max_tokens_is_sent_again_as_max_completion_tokens_and_remembered():
    with FakeOpenAIServer(default=reasoning_model) as server:
        llm = client(server.base_url)
        first, second = ask(llm, times=2)
    assert (first.text, second.text) == ("limit 64", "limit 64")
    assert kinds(first.attempt_log) == ["field_refused", "ok"]
    assert kinds(second.attempt_log) == ["ok"]  # learnt: no second refusal
    assert llm.token_field == "max_completion_tokens"
    sent = [set(r.body) & {"max_tokens", "max_completion_tokens"} for r in server.requests]
    assert sent == [{"max_tokens"}, {"max_completion_tokens"}, {"max_completion_tokens"}]


def test_the_config_can_send_max_completion_tokens_from_the_start():
    with FakeOpenAIServer(default=reasoning_model) as server:
        (completion,) = ask(client(server.base_url, max_tokens_field="max_completion_tokens"))
    assert completion.text == "limit 64" and len(server.requests) == 1


def test_a_refused_field_named_in_the_config_is_fatal():
    with FakeOpenAIServer(default=reasoning_model) as server:
        (error,) = ask(client(server.base_url, max_tokens_field="max_tokens"))
    assert isinstance(error, LLMRequestError) and REFUSED_MAX_TOKENS in str(error)
    assert len(server.requests) == 1


def test_a_server_refusing_both_fields_is_fatal_after_one_switch():
    refuse_both = Status(400, message="Unknown parameter: max_tokens / max_completion_tokens")
    with FakeOpenAIServer(default=refuse_both) as server:
        (error,) = ask(client(server.base_url))
    assert isinstance(error, LLMRequestError) and len(server.requests) == 2


def test_a_plain_bad_request_naming_max_tokens_is_not_a_field_switch():
    with FakeOpenAIServer([Status(400, message="max_tokens is too large: 99999")]) as server:
        (error,) = ask(client(server.base_url))
    assert isinstance(error, LLMRequestError) and len(server.requests) == 1


def test_openai_base_url_is_the_default_read_at_call_time(monkeypatch):
    with FakeOpenAIServer(["from the environment"]) as server:
        llm = client("")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        (completion,) = ask(llm)
    assert completion.text == "from the environment"


def test_without_base_url_or_openai_base_url_the_error_says_what_to_set():
    (error,) = ask(client(""))
    assert isinstance(error, LLMRequestError) and "OPENAI_BASE_URL" in str(error)


def test_llm_errors_pickle_with_their_class_and_attempts():
    attempt = Attempt("m", 1, "timeout", None, "no answer", 0.5)
    for error in (LLMError("x", 503, (attempt,)), LLMUnavailable("down", None, (attempt,))):
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), str(copy), copy.attempts, copy.fatal) == (
            type(error), str(error), (attempt,), error.fatal)


# -- whole runs ----------------------------------------------------------------------


class PassingJudge:
    """Passes every candidate at once."""

    device = "cpu"

    def prebuild(self, candidate):
        return 0.0

    def evaluate(self, candidate):
        stats = TimingStats(1.0, 0.01, 0.9, 20)
        return verdict_for("passed", timings={"candidate": stats}, speedup_vs_eager=1.0)


def make_run(tmp_path, base_url: str, *, budget: Budget | None = None, in_flight: int = 2,
             max_output_tokens: int = 256, proposer=None, **settings):
    store = RunStore.create(tmp_path, "add", TASK_SOURCE, {})
    budget = budget or Budget()
    config = ClientConfig(base_url=base_url, model="fake-model", **{**FAST, **settings})
    pool = ModelPool.from_models(config, {"fake-model": 1.0}, budget=budget,
                                 max_in_flight=in_flight)
    proposer = proposer or LLMProposer(pool, store, TASK_SOURCE, "triton", "fp32",
                                       max_output_tokens, random.Random(0))
    search = SearchConfig(backend="triton", llm_in_flight=in_flight, tuner_variants=0)
    evolution = Evolution(store, [PassingJudge()], search, budget, proposer)
    evolution.seed([Candidate(SEED, "triton", origin="seed")])
    return evolution, store, pool


def finish(evolution: Evolution, pool: ModelPool, timeout_s: float = 60.0) -> RunOutcome:
    async def go():
        try:
            return await asyncio.wait_for(evolution.run(), timeout_s)
        finally:
            await pool.aclose()

    outcome = asyncio.run(go()).outcome
    assert outcome is not None
    return outcome


def stop_event(store: RunStore) -> dict:
    (stop,) = store.events("stop")
    return stop.payload


def test_an_unreachable_endpoint_ends_the_run_as_llm_failed(tmp_path):
    url = closed_port_url()
    evolution, store, pool = make_run(tmp_path, url, max_attempts=2, breaker_failures=3)
    outcome = finish(evolution, pool)
    assert outcome.status == "llm_failed" and outcome.failed
    assert url in outcome.reason and "connection failed" in outcome.reason
    assert stop_event(store) == {"status": "llm_failed", "reason": outcome.reason}
    attempts = store.events("llm_attempt")
    assert attempts and {e.payload["kind"] for e in attempts} == {"connection"}
    assert any(e.payload["fatal"] for e in store.events("llm_error"))


def test_a_refused_key_ends_the_run_at_once_with_the_server_message(tmp_path):
    with FakeOpenAIServer(default="never", api_key="sk-right") as server:
        evolution, store, pool = make_run(tmp_path, server.base_url)
        outcome = finish(evolution, pool)
        requests = len(server.requests)
    assert outcome.status == "llm_failed" and "HTTP 401" in outcome.reason
    assert f"{KEY_ENV} is not set" in outcome.reason
    assert requests <= 2  # one per call in flight, no retries
    assert {call.state for call in store.llm_calls()} == {"failed"}


def test_an_unknown_model_ends_the_run_with_the_server_message(tmp_path):
    missing = Status(404, message="The model `fake-model` does not exist",
                     error_type="model_not_found")
    with FakeOpenAIServer(default=missing) as server:
        evolution, store, pool = make_run(tmp_path, server.base_url)
        outcome = finish(evolution, pool)
    assert outcome.status == "llm_failed"
    assert "The model `fake-model` does not exist" in outcome.reason


def test_a_hanging_server_ends_the_run_naming_the_endpoint(tmp_path):
    with FakeOpenAIServer(default=Delay(30.0, "too late")) as server:
        evolution, store, pool = make_run(tmp_path, server.base_url, timeout_s=0.3,
                                          breaker_failures=3)
        started_s = time.monotonic()
        outcome = finish(evolution, pool)
    assert outcome.status == "llm_failed" and server.base_url in outcome.reason
    assert "timeout_s=0.3" in outcome.reason
    assert time.monotonic() - started_s < 10.0


def test_retried_attempts_are_recorded_in_the_run_store(tmp_path):
    kernel = f"```python\n# a new kernel\n{SEED}\n```"
    with FakeOpenAIServer([500, 503], default=kernel) as server:
        # One candidate allowed, so exactly one call.
        evolution, store, pool = make_run(tmp_path, server.base_url, in_flight=1,
                                          budget=Budget(candidates=1))
        outcome = finish(evolution, pool)
    assert outcome.status == "budget_spent" and "candidate budget" in outcome.reason
    (call,) = store.llm_calls()
    attempts = [e.payload for e in store.events("llm_attempt")]
    assert [(a["call"], a["kind"], a["status"]) for a in attempts] == [
        (call.id, "retryable_status", 500), (call.id, "retryable_status", 503),
        (call.id, "ok", 200)]
    assert all(a["model"] == "fake-model" and a["latency_s"] >= 0 for a in attempts)


def test_a_run_whose_calls_all_failed_is_llm_failed(tmp_path):
    # Failures the breaker lets through (it needs 1000 in a row) until time runs out.
    with FakeOpenAIServer(default=500) as server:
        evolution, store, pool = make_run(tmp_path, server.base_url, max_attempts=1,
                                          budget=Budget(wall_s=2.5))
        outcome = finish(evolution, pool)
    assert outcome.status == "llm_failed"
    assert outcome.reason.startswith("the LLM never answered: ")
    assert " calls failed, the last with: " in outcome.reason
    assert "HTTP 500" in outcome.reason
    # Every call was answered with an error and no usage: nothing billed. A call
    # whose request was out when the time ran out (on a loaded machine) is
    # charged its worst case, as an estimate only.
    totals = store.totals()
    assert totals.tokens_in + totals.tokens_out == totals.estimated_tokens


class BrokenProposer:
    async def propose(self, parent, inspirations, repair=False):
        raise RuntimeError("a bug in the proposer")


def test_an_error_in_a_proposer_task_is_logged_stored_and_ends_the_run(tmp_path, caplog):
    evolution, store, pool = make_run(tmp_path, closed_port_url(), proposer=BrokenProposer())
    with caplog.at_level(logging.ERROR, logger="kernelevo"):
        outcome = finish(evolution, pool)
    assert outcome.status == "error" and "a bug in the proposer" in outcome.reason
    (event,) = store.events("task_error")[:1]
    assert event.payload["role"] == "proposer" and "RuntimeError" in event.payload["traceback"]
    assert any("proposer task failed" in r.getMessage() for r in caplog.records)
    assert stop_event(store)["status"] == "error"


def test_a_dollar_budget_with_an_unknown_price_ends_the_run_saying_what_to_add(tmp_path):
    with FakeOpenAIServer(default="never sent") as server:
        evolution, store, pool = make_run(tmp_path, server.base_url, budget=Budget(usd=1.0))
        outcome = finish(evolution, pool)
        requests = len(server.requests)
    assert outcome.status == "error" and "[llm.prices]" in outcome.reason
    assert requests == 0 and store.llm_calls() == []


def test_several_proposers_spend_the_token_budget_to_its_end_without_crossing_it(tmp_path):
    max_output, used = 2000, 5000
    # Each answer uses half its worst case (about 8k input bound + 2k output):
    # reservations of calls in flight, not spending, refuse calls until the end.
    answer = Reply("no code in this answer", prompt_tokens=used - 100, completion_tokens=100)
    budget = Budget(tokens=120_000)
    with FakeOpenAIServer(default=lambda request: Delay(random.uniform(0.01, 0.05),
                                                        answer)) as server:
        evolution, store, pool = make_run(tmp_path, server.base_url, budget=budget,
                                          in_flight=8, max_output_tokens=max_output)
        outcome = finish(evolution, pool, timeout_s=120)
        in_flight = server.max_in_flight
    calls = store.llm_calls()
    worst_case = max(input_token_bound(c.prompt["messages"]) for c in calls) + max_output
    assert 2 * worst_case > used and 8 * worst_case > budget.limits.tokens / 2
    usage = budget.usage()
    assert outcome.status == "budget_spent" and "even with no call in flight" in outcome.reason
    assert usage.tokens <= budget.limits.tokens and usage.outstanding == 0
    # Stopped only once one more worst case could not fit with nothing in flight.
    assert usage.tokens > budget.limits.tokens - worst_case
    assert in_flight > 1 and len(calls) == usage.tokens // used
    # No proposer gave up early on a refusal that settling calls could lift.
    # Each stop names its own worst case (its prompt, which may be one never sent and
    # longer than any sent): with nothing in flight, that one no longer fit.
    stops = [e.payload["message"] for e in store.events("budget")]
    assert len(stops) == 8
    for message in stops:
        own_worst = int(re.search(r"\(([\d,]+) tokens", message)[1].replace(",", ""))
        spent = int(re.search(r"with ([\d,]+) tokens", message)[1].replace(",", ""))
        assert spent + own_worst > budget.limits.tokens, message


def test_a_call_cancelled_in_flight_is_charged_its_worst_case(tmp_path):
    budget = Budget(tokens=100_000)
    with FakeOpenAIServer(default=Delay(30.0, "too late")) as server:
        evolution, store, pool = make_run(tmp_path, server.base_url, budget=budget)
        seed = store.candidates()[0]
        store.mark_evaluating(seed.id)
        store.record_verdict(seed.id, PassingJudge().evaluate(seed.candidate))

        async def cut_off() -> None:
            # Cancelled once the server holds the request (not after a fixed time,
            # which a loaded machine can spend before the request is even sent).
            call = asyncio.ensure_future(
                evolution.proposer.propose(store.candidate(seed.id), [], repair=False))
            try:
                waited = time.monotonic()
                while not server.requests and not call.done():
                    assert time.monotonic() - waited < 30, "the request never reached the server"
                    await asyncio.sleep(0.01)
                call.cancel()
                await call
            finally:
                await pool.aclose()

        with pytest.raises(asyncio.CancelledError):
            asyncio.run(cut_off())
    (call,) = store.llm_calls()
    worst = input_token_bound(call.prompt["messages"])
    assert call.state == "failed" and "charged the call's worst case" in call.error
    assert (call.input_tokens, call.output_tokens) == (worst, 256)
    assert call.prompt["max_input_tokens"] == worst
    assert budget.usage().tokens == worst + 256 and budget.usage().outstanding == 0


def test_usage_above_the_worst_case_is_charged_the_worst_case_and_flagged(tmp_path):
    budget = Budget(tokens=1_000_000)
    # A server that ignores max_tokens, or lies: more than the prompt's bound plus 256.
    greedy = Reply("no code in this answer", prompt_tokens=50, completion_tokens=20_000)
    with FakeOpenAIServer([greedy], default="no code") as server:
        evolution, store, pool = make_run(tmp_path, server.base_url, in_flight=1,
                                          budget=budget, max_output_tokens=256)
        seed = store.candidates()[0]
        store.mark_evaluating(seed.id)
        store.record_verdict(seed.id, PassingJudge().evaluate(seed.candidate))

        async def one() -> None:
            try:
                await evolution.proposer.propose(store.candidate(seed.id), [], repair=False)
            finally:
                await pool.aclose()

        asyncio.run(one())
    (call,) = store.llm_calls()
    worst_input = input_token_bound(call.prompt["messages"])
    assert (call.input_tokens, call.output_tokens) == (worst_input, 256)
    assert "20,000 output tokens" in call.error and "worst case" in call.error
    (flag,) = store.events("llm_usage_flagged")
    assert flag.payload["charged_tokens"] == flag.payload["worst_case_tokens"] == worst_input + 256
    assert budget.usage().tokens == worst_input + 256 and budget.usage().overshoot_tokens == 0
    assert store.totals().estimated_tokens == worst_input + 256


CHILD = """
import asyncio, random, sys
from kernelevo.budget import Budget
from kernelevo.candidate import Candidate
from kernelevo.evaluate.verdict import verdict_for
from kernelevo.llm import ClientConfig, ModelPool
from kernelevo.search.proposals import LLMProposer
from kernelevo.store.run_store import RunStore
store = RunStore.open(sys.argv[1])
seed = store.add_candidate(Candidate(source=sys.argv[3], backend="triton", origin="seed"))
store.mark_evaluating(seed)
store.record_verdict(seed, verdict_for("passed", speedup_vs_eager=1.0))
config = ClientConfig(base_url=sys.argv[2], model="fake-model", timeout_s=600)
pool = ModelPool.from_models(config, {"fake-model": 1.0}, budget=Budget())
proposer = LLMProposer(pool, store, "task", "triton", "fp32", 4000, random.Random(0))
asyncio.run(proposer.propose(store.candidate(seed), [], repair=False))
"""


def test_a_call_cut_off_by_a_kill_is_charged_its_worst_case_on_resume(tmp_path):
    from kernelevo.run.setup import make_budget

    path = RunStore.create(tmp_path, "add", TASK_SOURCE, {}).path
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with FakeOpenAIServer(default=Delay(60.0, "too late")) as server:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), server.base_url,
                                  SEED], env=env)
        try:
            deadline = time.monotonic() + 60
            while not server.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            assert server.requests, "the child never sent its call"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
    with RunStore.open(path) as store:
        (call,) = store.interrupted_llm_calls()
        worst_input = input_token_bound(call.prompt["messages"])
        limits = {"tokens": 1_000_000, "usd": None, "candidates": None, "wall_s": None}
        budget = make_budget(limits, store)  # what --resume does first
        (settled,) = store.llm_calls()
    assert (settled.input_tokens, settled.output_tokens) == (worst_input, 4000)
    assert budget.usage().tokens == worst_input + 4000
    with RunStore.open(path) as store:
        assert store.totals().estimated_tokens == worst_input + 4000  # shown apart as such
