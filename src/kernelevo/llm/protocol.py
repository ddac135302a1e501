"""The LLM seam: one async method, one result type, one error type.

Everything above this seam (proposals, repair, the search loop) sees only
`LLMClient.complete`, so tests can fake the model with a few lines and any
endpoint can be plugged in without touching the search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kernelevo.errors import KernelEvoError

# A common rule of thumb for English and code with BPE tokenizers; used only
# when the server reports no usage, and the completion is then marked estimated.
CHARS_PER_TOKEN = 4


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

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


@runtime_checkable
class LLMClient(Protocol):
    """Anything that turns chat messages into a Completion."""

    async def complete(self, messages: list[dict], *, max_tokens: int) -> Completion:
        """Answer `messages` with at most `max_tokens` output tokens."""
        ...


class LLMError(KernelEvoError):
    """A call that cannot succeed as configured (bad key, bad request, retries exhausted)."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code

    def __reduce__(self):  # keep status_code across process boundaries
        return (type(self), (str(self), self.status_code))


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
