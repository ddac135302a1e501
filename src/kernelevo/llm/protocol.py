"""The LLM seam: one async method, its result and call types.

Everything above this seam (proposals, repair, the search loop) sees only
`LLMClient.complete`, the types here and the LLM errors (`LLMError` and its
kinds, in kernelevo.errors with every other error), so tests can fake the
model with a few lines and any endpoint can be plugged in without touching
the search.
"""

from __future__ import annotations

import math
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

# A common rule of thumb for English and code with BPE tokenizers; used only
# when the server reports no usage, and the completion is then marked estimated.
CHARS_PER_TOKEN = 4

# Attempt.kind values: what one HTTP request of a call came to.
ATTEMPT_KINDS = ("ok", "retryable_status", "refused", "field_refused", "timeout",
                 "connection", "malformed", "empty")


@dataclass(frozen=True)
class Attempt:
    """One HTTP request of a call: its outcome and how long it took, in seconds."""

    model: str
    number: int  # 1-based, within its call
    kind: str  # one of ATTEMPT_KINDS
    status_code: int | None  # None when no HTTP answer came back
    error: str  # "" for a successful attempt
    latency_s: float


@dataclass(frozen=True)
class Completion:
    """One model answer with its token counts, cost in USD and latency in seconds."""

    text: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_s: float
    attempts: int
    estimated: bool = False
    finish_reason: str = ""
    attempt_log: tuple[Attempt, ...] = ()
    # Set when the tokens are not what the server reported (implausible usage, or
    # a request of the call cut off after it was sent): why, and that they are a bound.
    usage_note: str = ""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


class CallProgress:
    """Where one call's requests stand, so that only a request the server got is charged.

    `request_out` is True while a request may be at the server (its first
    byte went out, no answer yet), False while none is (before sending,
    connecting, waiting to retry), None when the client does not say (then a
    call cut off is assumed billed). `cut_off` is set once a request that went
    out got no answer (a timeout, a connection dropped mid-answer).
    """

    def __init__(self) -> None:
        self.request_out: bool | None = None
        self.cut_off = False

    @property
    def maybe_billed(self) -> bool:
        """Whether a call stopped now may have been billed by the provider."""
        return self.cut_off or self.request_out is not False


# The progress of the call being made in this task; the model pool sets it and
# a client that can tell sending from connecting or waiting updates it.
CALL_PROGRESS: ContextVar[CallProgress | None] = ContextVar("kernelevo_call_progress",
                                                            default=None)


@dataclass(frozen=True)
class CallStart:
    """A call about to be sent: its model and its worst case in tokens and USD."""

    model: str
    max_input_tokens: int
    max_output_tokens: int
    cost_bound_usd: float
    progress: CallProgress = field(default_factory=CallProgress, compare=False, repr=False)

    @property
    def max_tokens(self) -> int:
        """The most tokens the call can use, input and output."""
        return self.max_input_tokens + self.max_output_tokens


@runtime_checkable
class LLMClient(Protocol):
    """Anything that turns chat messages into a Completion."""

    async def complete(self, messages: list[dict], *, max_tokens: int) -> Completion:
        """Answer `messages` with at most `max_tokens` output tokens."""
        ...


def estimate_tokens(text: str) -> int:
    """Estimated token count of `text` when the server reports none."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def messages_text(messages: list[dict]) -> str:
    """The text content of chat messages, joined; non-text parts are skipped."""
    parts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # multi-part content: [{"type": "text", "text": ...}]
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return "\n".join(parts)
