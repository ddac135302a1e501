"""Fakes of the outside world for tests: an OpenAI-compatible HTTP server."""

from .openai_server import (
    Delay,
    Drop,
    FakeOpenAIServer,
    Hang,
    QUOTA_SPENT,
    Malformed,
    RecordedRequest,
    Reply,
    Status,
    Trickle,
)

__all__ = [
    "Delay",
    "Drop",
    "FakeOpenAIServer",
    "Hang",
    "Malformed",
    "QUOTA_SPENT",
    "RecordedRequest",
    "Reply",
    "Status",
    "Trickle",
]
