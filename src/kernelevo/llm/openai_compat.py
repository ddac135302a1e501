"""A client for any OpenAI-compatible chat completions endpoint, over httpx.

OpenRouter, vLLM, SGLang, Ollama and the providers' own APIs all speak this
protocol. Every request ends on its own: with no byte from the server for
`idle_timeout_s`, or no complete answer within `timeout_s`. Transient
failures (429, 5xx, timeouts, dropped connections, garbled bodies) are
retried with exponential backoff and full jitter, or
after the wait a server asks for in Retry-After (for every call to it), and
counted by a circuit breaker shared across calls; failures that retrying
cannot fix (a bad key, an unknown model, a bad request, a spent quota)
raise LLMRequestError at once with the server's message and what to change.
An answer with no content is a failed call (LLMEmptyAnswer), counted by the
breaker and charged the usage the server reported.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import kernelevo.llm.replies as replies
from kernelevo.errors import ConfigError, LLMEmptyAnswer, LLMError, LLMRequestError, LLMUnavailable
from kernelevo.llm.breaker import DEFAULT_GIVE_UP_S, CircuitBreaker
from kernelevo.schema import (AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Annotated, Check, OneOf,
                              check_fields)
from kernelevo.llm.pricing import Price, PriceTable
from kernelevo.llm.replies import TOKEN_FIELDS
from kernelevo.llm.protocol import (
    CALL_PROGRESS,
    Attempt,
    CallProgress,
    Completion,
    estimate_tokens,
    messages_text,
)

if TYPE_CHECKING:  # loaded where a call is made: `eval`, `serve` never need it (0.07 s)
    import httpx

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})
# OpenAI's error code for a 429 that means "no credit", not "too fast".
QUOTA_SPENT = "insufficient_quota"
BASE_URL_ENV = "OPENAI_BASE_URL"
MAX_TOKENS_FIELD_CHOICES = ("auto", *TOKEN_FIELDS)


def check_base_url(base_url: str) -> str:
    """`base_url` if empty (OPENAI_BASE_URL) or an http(s) URL that parses, its port in range;
    else ConfigError saying what to give (the caller names the setting)."""
    if base_url:
        try:
            parts = urllib.parse.urlsplit(base_url)
            parts.port  # out of range or not a number: ValueError
        except ValueError as exc:
            raise ConfigError(f"{base_url!r} is no valid URL ({exc}): give e.g. "
                              "https://api.openai.com/v1 or http://localhost:8000/v1") from None
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(
                f"{base_url!r} is not an http(s) URL with a host: "
                "give e.g. https://api.openai.com/v1 or http://localhost:8000/v1"
            )
    return base_url


def _check_key_name(name: str) -> None:
    """ConfigError unless `name` can name an environment variable (the key is never stored)."""
    if not name.strip() or "=" in name or "\0" in name:
        raise ConfigError(f"{name!r} is no environment variable's name: give the variable "
                          "that holds the key, e.g. OPENAI_API_KEY")


@dataclass(frozen=True)
class ClientConfig:
    """Where and how to call one model; the API key itself is never stored here.

    An empty `base_url` means the `OPENAI_BASE_URL` environment variable, read
    at call time. `max_tokens_field` "auto" sends `max_tokens` until a server
    refuses it for this model, then `max_completion_tokens`.
    """

    base_url: Annotated[str, Check(check_base_url)]
    model: str
    api_key_env: Annotated[str, Check(_check_key_name)] = "OPENAI_API_KEY"
    temperature: Annotated[float, NON_NEGATIVE] = 0.7
    timeout_s: Annotated[float, POSITIVE] = 300.0  # for the whole answer of one request
    idle_timeout_s: Annotated[float, POSITIVE] = 60.0  # with no byte from the server
    max_attempts: Annotated[int, AT_LEAST_ONE] = 6
    backoff_base_s: Annotated[float, NON_NEGATIVE] = 1.0
    backoff_max_s: Annotated[float, NON_NEGATIVE] = 60.0
    retry_after_max_s: Annotated[float, NON_NEGATIVE] = 120.0
    max_tokens_field: Annotated[str, OneOf(MAX_TOKENS_FIELD_CHOICES)] = "auto"
    breaker_failures: Annotated[int, AT_LEAST_ONE] = 8
    breaker_min_s: Annotated[float, NON_NEGATIVE] = 30.0
    # The run ends as llm_failed once no call has succeeded for this long while
    # calls keep failing (a permanent 429, an endpoint that lets nothing through).
    give_up_s: Annotated[float, POSITIVE] = DEFAULT_GIVE_UP_S

    def __post_init__(self) -> None:
        check_fields(self)
        if self.give_up_s < self.timeout_s:
            raise ConfigError(
                f"[llm] give_up_s ({self.give_up_s:g} s) is below timeout_s "
                f"({self.timeout_s:g} s): one slow call would end the run; give "
                f"give_up_s >= timeout_s")


class _AttemptFailed(Exception):
    """One request failed; `kind` (an Attempt kind) says whether another may succeed."""

    def __init__(self, kind: str, reason: str, status_code: int | None = None,
                 retry_after_s: float | None = None, detail: str = "", field: str = "",
                 usage: tuple[int, int] | None = None) -> None:
        super().__init__(reason)
        self.kind, self.status_code = kind, status_code
        self.retry_after_s, self.detail, self.field = retry_after_s, detail, field
        self.usage = usage  # (input, output) tokens the server reported with an empty answer

    @property
    def retryable(self) -> bool:
        # An empty answer is not asked again within the call: each one may be billed.
        return self.kind not in ("refused", "field_refused", "empty")

    @property
    def endpoint_failed(self) -> bool:
        """A failure of the endpoint itself, which the circuit breaker counts."""
        # A 429 counts: a server that refuses every request for its rate or
        # quota serves no more than one that is down.
        return self.kind in ("retryable_status", "timeout", "connection", "malformed", "empty")


class OpenAICompatClient:
    """LLMClient for one model at one OpenAI-compatible endpoint."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        price: Price | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.config = config
        if price is None:
            price = PriceTable.with_overrides().lookup(config.model)
        self.price = price
        self.breaker = breaker or CircuitBreaker(config.breaker_failures, config.breaker_min_s,
                                                 config.give_up_s)
        self._transport = transport
        self._rng = rng or random.Random()
        self._http: httpx.AsyncClient | None = None
        # Learnt once per model: a server that refused max_tokens refuses it every time.
        auto = config.max_tokens_field == "auto"
        self.token_field = TOKEN_FIELDS[0] if auto else config.max_tokens_field

    @property
    def model(self) -> str:
        """The model name sent to the endpoint."""
        return self.config.model

    def endpoint(self) -> str:
        """The base URL: the configured one, else OPENAI_BASE_URL as it is now."""
        url = self.config.base_url or os.environ.get(BASE_URL_ENV, "")
        if not url:
            raise LLMRequestError(f"no base_url is configured and {BASE_URL_ENV} is not set: "
                                  "give --base-url, [llm] base_url or set " + BASE_URL_ENV)
        if not url.startswith(("http://", "https://")):
            raise LLMRequestError(f"{BASE_URL_ENV} is {url!r}, not an http(s) URL: give e.g. "
                                  "https://api.openai.com/v1 or http://localhost:8000/v1")
        return url.rstrip("/")

    async def complete(self, messages: list[dict], *, max_tokens: int) -> Completion:
        """Answer `messages`, retrying transient failures up to max_attempts times."""
        started_s = time.monotonic()
        endpoint = self.endpoint()
        attempts: list[Attempt] = []
        may_switch = self.config.max_tokens_field == "auto"
        progress = CALL_PROGRESS.get() or CallProgress()
        progress.request_out = False
        while True:
            try:
                body = await self._retrying(endpoint, messages, max_tokens, attempts, progress)
            except _AttemptFailed as refused:  # only field refusals get here
                if not may_switch:
                    raise self._status_error(endpoint, refused, attempts) from None
                may_switch = False
                self._switch_field(refused)
                continue
            latency_s = time.monotonic() - started_s
            return self._completion(body, messages, tuple(attempts), latency_s)

    async def aclose(self) -> None:
        """Close pooled connections."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def __aenter__(self) -> OpenAICompatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _retrying(self, endpoint: str, messages: list[dict], max_tokens: int,
                        attempts: list[Attempt], progress: CallProgress) -> dict[str, Any]:
        """The answer's body; raises LLMError, or _AttemptFailed for a refused token field."""
        for number in range(1, self.config.max_attempts + 1):
            await self._wait_for_endpoint(attempts)
            try:
                return await self._attempt(endpoint, messages, max_tokens, attempts, progress)
            except _AttemptFailed as failure:
                if failure.kind == "field_refused":
                    raise
                if failure.kind == "empty":
                    raise self._empty_error(endpoint, failure, attempts) from None
                if not failure.retryable:
                    raise self._status_error(endpoint, failure, attempts) from None
                self._honour_retry_after(endpoint, failure)
                self._check_breaker(attempts)  # this failure, or another call's, opened it
                if number == self.config.max_attempts:
                    raise self._exhausted_error(endpoint, failure, attempts) from None
                delay_s = self._delay_s(number, failure.retry_after_s)
                log.warning("%s: attempt %d failed (%s); retrying in %.2f s",
                            self.config.model, number, failure, delay_s)
                await asyncio.sleep(delay_s)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _wait_for_endpoint(self, attempts: list[Attempt]) -> None:
        """Wait out a Retry-After the server gave any call, then check the breaker."""
        self._check_breaker(attempts)
        wait_s = self.breaker.wait_s()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
            self._check_breaker(attempts)

    def _honour_retry_after(self, endpoint: str, failure: _AttemptFailed) -> None:
        """Hold every call for the server's Retry-After; one too long to wait ends the calls."""
        wait_s = failure.retry_after_s
        if wait_s is None:
            return
        if wait_s > self.config.retry_after_max_s:
            self.breaker.trip(
                f"the LLM endpoint {endpoint} answered {failure} and asks for a wait of "
                f"{wait_s:.0f} s (Retry-After), longer than [llm] retry_after_max_s = "
                f"{self.config.retry_after_max_s:g}: continue the run later with --resume, "
                "or raise retry_after_max_s")
            return
        self.breaker.hold(wait_s)

    def _check_breaker(self, attempts: list[Attempt]) -> None:
        try:
            self.breaker.check()
        except LLMUnavailable as exc:
            raise LLMUnavailable(str(exc), None, tuple(attempts)) from None

    def _client(self) -> httpx.AsyncClient:
        # Created on first use so that it belongs to the running event loop.
        if self._http is None:
            import httpx

            # Each connect, read and write waits at most idle_timeout_s for
            # the server (a byte every few seconds keeps a request going until
            # timeout_s, _post); only a free connection of the pool is waited for longer.
            idle_s = min(self.config.idle_timeout_s, self.config.timeout_s)
            self._http = httpx.AsyncClient(
                transport=self._transport,
                timeout=httpx.Timeout(idle_s, pool=self.config.timeout_s))
        return self._http

    def _headers(self) -> dict[str, str]:
        # Read at call time so a key set or rotated after startup is used.
        key = os.environ.get(self.config.api_key_env, "")
        # Local servers (vLLM, Ollama) need no key; send none rather than fail.
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def _attempt(self, endpoint: str, messages: list[dict], max_tokens: int,
                       attempts: list[Attempt], progress: CallProgress) -> dict[str, Any]:
        field = self.token_field
        payload = {"model": self.config.model, "messages": messages, field: max_tokens,
                   "temperature": self.config.temperature}
        started_s = time.monotonic()
        try:
            body = await self._post(endpoint + "/chat/completions", payload, field, progress)
            empty = replies.no_text(body)
            if empty:
                raise _AttemptFailed("empty", empty, usage=replies.reported_usage(body))
        except _AttemptFailed as failure:
            attempts.append(self._record(len(attempts) + 1, failure.kind, failure.status_code,
                                         str(failure), started_s))
            self._tell_breaker(endpoint, failure, started_s)
            raise
        attempts.append(self._record(len(attempts) + 1, "ok", 200, "", started_s))
        self.breaker.succeeded()
        return body

    async def _post(self, url: str, payload: dict[str, Any], field: str,
                    progress: CallProgress) -> dict[str, Any]:
        import httpx

        async def trace(event: str, info: dict[str, Any]) -> None:
            # httpcore's events tell connecting (nothing sent) from sending.
            if event.endswith("connect_tcp.started"):
                progress.request_out = False
            elif event.endswith("send_request_headers.started"):
                progress.request_out = True

        # Until a transport says otherwise, a request under way may have reached the server.
        progress.request_out = True
        post = self._client().post(url, json=payload, headers=self._headers(),
                                   extensions={"trace": trace})
        try:
            # httpx timeouts bound each read; this bounds the whole attempt,
            # so a server that trickles bytes cannot hold a call forever.
            # (wait_for, not asyncio.timeout: Python 3.10 is supported.)
            response = await asyncio.wait_for(post, self.config.timeout_s)
        except asyncio.TimeoutError:
            raise self._unanswered(progress, "timeout", f"no answer within timeout_s="
                                   f"{self.config.timeout_s:g} s") from None
        except httpx.TimeoutException:
            raise self._unanswered(progress, "timeout", f"no byte from the server for "
                                   f"idle_timeout_s={self.config.idle_timeout_s:g} s") from None
        except httpx.TransportError as exc:
            raise self._unanswered(progress, "connection", f"connection failed: "
                                   f"{type(exc).__name__}: {exc}") from None
        # (A cancellation leaves request_out as it was: the pool charges by it.)
        progress.request_out = False
        return self._check(response, field)

    @staticmethod
    def _unanswered(progress: CallProgress, kind: str, reason: str) -> _AttemptFailed:
        """An attempt that got no answer; one whose request went out may have been billed."""
        progress.cut_off |= bool(progress.request_out)
        progress.request_out = False
        return _AttemptFailed(kind, reason)

    def _tell_breaker(self, endpoint: str, failure: _AttemptFailed, started_s: float) -> None:
        if not failure.endpoint_failed:
            self.breaker.answered()  # the server answered, if only to refuse
        elif self.breaker.failed(endpoint, str(failure), started_s):
            log.error("circuit breaker open for %s: %s", endpoint, failure)

    def _record(self, number: int, kind: str, status_code: int | None, error: str,
                started_s: float) -> Attempt:
        return Attempt(self.config.model, number, kind, status_code, error[:500],
                       time.monotonic() - started_s)

    def _check(self, response: httpx.Response, field: str) -> dict[str, Any]:
        status = response.status_code
        if status == 429 and replies.error_code(response) == QUOTA_SPENT:
            # Out of credit, not busy: no wait makes the next request succeed.
            detail = replies.server_message(response)
            raise _AttemptFailed("refused", f"HTTP 429: {detail}", status, detail=detail)
        if status in RETRYABLE_STATUS:
            raise _AttemptFailed("retryable_status", f"HTTP {status}", status,
                                 replies.retry_after_s(response.headers.get("retry-after")))
        if status >= 300:  # redirects are not followed: a POST must reach the final URL
            detail = replies.server_message(response)
            kind = "field_refused" if replies.refuses_field(status, detail, field) else "refused"
            raise _AttemptFailed(kind, f"HTTP {status}: {detail}", status, detail=detail,
                                 field=field)
        try:
            body = response.json()
        except ValueError:
            raise _AttemptFailed("malformed", f"malformed JSON in answer: "
                                 f"{response.text[:80]!r}") from None
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            # Some routers answer 200 with an error object when an upstream fails.
            raise _AttemptFailed("malformed", f"answer has no choices: {response.text[:80]!r}")
        return body

    def _switch_field(self, refused: _AttemptFailed) -> None:
        sent = refused.field
        # Set, not toggled: calls in flight that were refused too agree on the answer.
        self.token_field = TOKEN_FIELDS[1] if sent == TOKEN_FIELDS[0] else TOKEN_FIELDS[0]
        log.warning("%s refused %s (%s); sending %s from now on", self.config.model, sent,
                    refused.detail[:120], self.token_field)

    def _status_error(self, endpoint: str, failure: _AttemptFailed,
                      attempts: list[Attempt]) -> LLMRequestError:
        status = failure.status_code or 0
        message = replies.refusal_message(status, self._redacted(failure.detail), endpoint,
                                          self.config.model, self.config.api_key_env)
        return LLMRequestError(message, status, tuple(attempts))

    def _redacted(self, text: str) -> str:
        # Some servers echo the key they refused; never carry it into logs or run.db.
        key = os.environ.get(self.config.api_key_env, "")
        return text.replace(key, "***") if len(key) >= 8 else text

    def _empty_error(self, endpoint: str, failure: _AttemptFailed,
                     attempts: list[Attempt]) -> LLMEmptyAnswer:
        usage = None
        if failure.usage is not None:
            input_tokens, output_tokens = failure.usage
            usage = (input_tokens, output_tokens,
                     self.price.cost_usd(input_tokens, output_tokens))
        hint = ("; raise max_output_tokens: the limit was reached before any text (a "
                "reasoning model may spend it all on reasoning)"
                if "finish_reason length" in str(failure) else "")
        return LLMEmptyAnswer(f"{self.config.model} at {endpoint} answered with {failure}: a "
                              f"failed call{hint}", None, tuple(attempts), usage)

    def _exhausted_error(self, endpoint: str, failure: _AttemptFailed,
                         attempts: list[Attempt]) -> LLMError:
        return LLMError(
            f"{self.config.model} at {endpoint} failed {self.config.max_attempts} "
            f"attempts, the last with: {failure}; check that the endpoint is up, or raise "
            "max_attempts or timeout_s", failure.status_code, tuple(attempts)
        )

    def _delay_s(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, self.config.retry_after_max_s)
        # Full jitter: many workers that failed together do not retry together.
        ceiling_s = min(self.config.backoff_max_s, self.config.backoff_base_s * 2 ** (attempt - 1))
        return self._rng.uniform(0.0, ceiling_s)

    def _completion(self, body: dict[str, Any], messages: list[dict],
                    attempts: tuple[Attempt, ...], latency_s: float) -> Completion:
        choice = body["choices"][0]
        message = choice.get("message")
        text = replies.content_text(message.get("content") if isinstance(message, dict) else None)
        reported = replies.reported_usage(body)
        estimated = reported is None
        input_tokens, output_tokens = reported or (estimate_tokens(messages_text(messages)),
                                                   estimate_tokens(text))
        return Completion(
            text=text,
            model=self.config.model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=self.price.cost_usd(input_tokens, output_tokens),
            latency_s=latency_s,
            attempts=len(attempts),
            estimated=estimated,
            finish_reason=str(choice.get("finish_reason") or ""),
            attempt_log=attempts,
        )
