"""A client for any OpenAI-compatible chat completions endpoint, over httpx.

OpenRouter, vLLM, SGLang, Ollama and the providers' own APIs all speak this
protocol. Transient failures (429, 5xx, timeouts, dropped connections,
garbled bodies) are retried with exponential backoff and full jitter;
failures that retrying cannot fix (a bad key, a bad request) raise LLMError
at once with what to change.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx

from kernelevo.errors import ConfigError
from kernelevo.llm.pricing import Price, PriceTable
from kernelevo.llm.protocol import Completion, LLMError, estimate_tokens, messages_text

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})
_ERROR_SNIPPET_CHARS = 300


@dataclass(frozen=True)
class ClientConfig:
    """Where and how to call one model; the API key itself is never stored here."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.7
    timeout_s: float = 300.0
    max_attempts: int = 6
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 120.0

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"base_url {self.base_url!r} is not an http(s) URL: "
                "give e.g. https://api.openai.com/v1 or http://localhost:8000/v1"
            )
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts is {self.max_attempts}: give 1 or more")
        if self.timeout_s <= 0:
            raise ConfigError(f"timeout_s is {self.timeout_s}: give a number of seconds > 0")


class _Retryable(Exception):
    """One attempt failed in a way that another attempt may fix."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class OpenAICompatClient:
    """LLMClient for one model at one OpenAI-compatible endpoint."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        price: Price | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        if price is None:
            price = PriceTable.with_overrides().lookup(config.model)
        self.price = price
        self._transport = transport
        self._rng = rng or random.Random()
        self._http: httpx.AsyncClient | None = None

    @property
    def model(self) -> str:
        """The model name sent to the endpoint."""
        return self.config.model

    async def complete(self, messages: list[dict], *, max_tokens: int) -> Completion:
        """Answer `messages`, retrying transient failures up to max_attempts times."""
        started_s = time.monotonic()
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                body = await self._attempt(messages, max_tokens)
            except _Retryable as failure:
                if attempt == self.config.max_attempts:
                    raise self._exhausted_error(failure) from None
                delay_s = self._delay_s(attempt, failure.retry_after_s)
                log.warning("%s: attempt %d failed (%s); retrying in %.2f s",
                            self.config.model, attempt, failure, delay_s)
                await asyncio.sleep(delay_s)
                continue
            return self._completion(body, messages, attempt, time.monotonic() - started_s)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def aclose(self) -> None:
        """Close pooled connections."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def __aenter__(self) -> OpenAICompatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _client(self) -> httpx.AsyncClient:
        # Created on first use so that it belongs to the running event loop.
        if self._http is None:
            self._http = httpx.AsyncClient(
                transport=self._transport, timeout=httpx.Timeout(self.config.timeout_s)
            )
        return self._http

    def _headers(self) -> dict[str, str]:
        # Read at call time so a key set or rotated after startup is used.
        key = os.environ.get(self.config.api_key_env, "")
        # Local servers (vLLM, Ollama) need no key; send none rather than fail.
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def _attempt(self, messages: list[dict], max_tokens: int) -> dict[str, Any]:
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        payload = {
            "model": self.config.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": self.config.temperature,
        }
        try:
            # httpx timeouts bound each read; this bounds the whole attempt,
            # so a server that trickles bytes cannot hold a call forever.
            async with asyncio.timeout(self.config.timeout_s):
                response = await self._client().post(url, json=payload, headers=self._headers())
        except TimeoutError:
            raise _Retryable(f"no answer within timeout_s={self.config.timeout_s}") from None
        except httpx.TimeoutException:
            raise _Retryable(f"no answer within timeout_s={self.config.timeout_s}") from None
        except httpx.TransportError as exc:
            raise _Retryable(f"connection failed: {type(exc).__name__}: {exc}") from None
        return self._check(response)

    def _check(self, response: httpx.Response) -> dict[str, Any]:
        status = response.status_code
        if status in RETRYABLE_STATUS:
            raise _Retryable(f"HTTP {status}", _retry_after_s(response.headers.get("retry-after")))
        if status >= 300:  # redirects are not followed: a POST must reach the final URL
            raise self._status_error(status, response.text[:_ERROR_SNIPPET_CHARS])
        try:
            body = response.json()
        except ValueError:
            raise _Retryable(f"malformed JSON in answer: {response.text[:80]!r}") from None
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            # Some routers answer 200 with an error object when an upstream fails.
            raise _Retryable(f"answer has no choices: {response.text[:80]!r}")
        return body

    def _status_error(self, status: int, detail: str) -> LLMError:
        where = f"{self.config.base_url} (model {self.config.model!r})"
        env = self.config.api_key_env
        if status in (401, 403):
            state = "is set but was refused" if os.environ.get(env) else "is not set"
            fix = f"set {env} to a valid API key for {self.config.base_url}"
            return LLMError(f"HTTP {status} from {where}: {env} {state}; {fix}", status)
        if status < 400 or status == 404:
            fix = "check base_url (usually ends in /v1, with the right scheme) and the model name"
            return LLMError(f"HTTP 404 from {where}: {detail}; {fix}", status)
        fix = "check the model name, max_tokens and the endpoint's limits"
        return LLMError(f"HTTP {status} from {where}: {detail}; {fix}", status)

    def _exhausted_error(self, failure: _Retryable) -> LLMError:
        return LLMError(
            f"{self.config.model} at {self.config.base_url} failed {self.config.max_attempts} "
            f"attempts, the last with: {failure}; check that the endpoint is up, or raise "
            "max_attempts or timeout_s"
        )

    def _delay_s(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, self.config.retry_after_max_s)
        # Full jitter: many workers that failed together do not retry together.
        ceiling_s = min(self.config.backoff_max_s, self.config.backoff_base_s * 2 ** (attempt - 1))
        return self._rng.uniform(0.0, ceiling_s)

    def _completion(
        self, body: dict[str, Any], messages: list[dict], attempts: int, latency_s: float
    ) -> Completion:
        choice = body["choices"][0]
        message = choice.get("message")
        text = _content_text(message.get("content") if isinstance(message, dict) else None)
        usage = body.get("usage") or {}
        input_tokens = usage.get("prompt_tokens")
        output_tokens = usage.get("completion_tokens")
        estimated = not isinstance(input_tokens, int) or not isinstance(output_tokens, int)
        if estimated:
            input_tokens = estimate_tokens(messages_text(messages))
            output_tokens = estimate_tokens(text)
        return Completion(
            text=text,
            model=self.config.model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=self.price.cost_usd(input_tokens, output_tokens),
            latency_s=latency_s,
            attempts=attempts,
            estimated=estimated,
            finish_reason=str(choice.get("finish_reason") or ""),
        )


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part content from some servers
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _retry_after_s(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: a number or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
