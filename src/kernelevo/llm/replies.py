"""Reading an OpenAI-compatible server's answers: error messages, limits, retry hints.

Pure functions of a response, so what servers say (OpenAI, vLLM, OpenRouter,
FastAPI validation errors) can be tested without a socket.
"""

from __future__ import annotations

import email.utils
import math
import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # loaded where a call is made: `eval`, `serve` never need it (0.07 s)
    import httpx


# The two names servers use for the output limit; reasoning models refuse the first.
TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")
ERROR_SNIPPET_CHARS = 300
# Words with which servers refuse a parameter they do not take (OpenAI, vLLM, pydantic).
_UNSUPPORTED_WORDS = ("not supported", "unsupported", "unrecognized", "unknown",
                      "not allowed", "not permitted", "extra")


def refuses_field(status: int, detail: str, field: str) -> bool:
    """Whether a 400/422 says the output-limit field we sent is not taken by this model."""
    text = detail.lower()
    other = TOKEN_FIELDS[1] if field == TOKEN_FIELDS[0] else TOKEN_FIELDS[0]
    return status in (400, 422) and field in text and (
        other in text or any(word in text for word in _UNSUPPORTED_WORDS))


def server_message(response: httpx.Response) -> str:
    """The error message of an OpenAI-style error body, else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if not isinstance(message, str) and isinstance(body, dict):
        message = body.get("message") or body.get("detail")  # vLLM, FastAPI
    text = message if isinstance(message, str) else response.text
    return text.strip()[:ERROR_SNIPPET_CHARS] or "(empty body)"


def error_code(response: httpx.Response) -> str:
    """The `code` (else `type`) of an OpenAI-style error body, "" when there is none."""
    try:
        body = response.json()
    except ValueError:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return ""
    code = error.get("code") or error.get("type")
    return code if isinstance(code, str) else ""


def refusal_message(status: int, detail: str, endpoint: str, model: str, key_env: str) -> str:
    """What a refused request (4xx, or a 429 for a spent quota) means, and what to change."""
    where = f"{endpoint} (model {model!r})"
    if status in (401, 403):
        state = "is set but was refused" if os.environ.get(key_env) else "is not set"
        fix = f"set {key_env} to a valid API key for {endpoint}"
        return f"HTTP {status} from {where}: {key_env} {state}; {fix} (server: {detail})"
    if status == 429:
        return (f"HTTP 429 from {where}: the account behind {key_env} has no quota or credit "
                f"left; add credit or use another key (server: {detail})")
    if status < 400 or status == 404:
        fix = ("check base_url (usually ends in /v1, with the right scheme) and the model name "
               "(GET /models lists them)")
    else:
        fix = ("check the model name, max_output_tokens, [llm] max_tokens_field and the "
               "endpoint's limits")
    return f"HTTP {status} from {where}: {detail}; {fix}"


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part content from some servers
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def no_text(body: dict[str, Any]) -> str:
    """Why a chat completion's first choice holds no text, e.g. 'no content (finish_reason
    length)'; "" when it holds some."""
    choice = body["choices"][0]
    message = choice.get("message")
    if content_text(message.get("content") if isinstance(message, dict) else None).strip():
        return ""
    finish = choice.get("finish_reason")
    return "no content" + (f" (finish_reason {finish})" if finish else "")


def reported_usage(body: dict[str, Any]) -> tuple[int, int] | None:
    """(input, output) tokens as the server reported them; None when it reported none."""
    usage = body.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    tokens_in, tokens_out = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if isinstance(tokens_in, int) and isinstance(tokens_out, int):
        return tokens_in, tokens_out
    return None


def retry_after_s(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: a number or an HTTP date."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
