"""Fakes of the outside world for tests: an OpenAI-compatible HTTP server."""

from .openai_server import (
    Delay,
    Drop,
    FakeOpenAIServer,
    QUOTA_SPENT,
    Malformed,
    RecordedRequest,
    Reply,
    Status,
)

__all__ = [
    "Delay",
    "Drop",
    "FakeOpenAIServer",
    "Malformed",
    "QUOTA_SPENT",
    "RecordedRequest",
    "Reply",
    "Status",
]
