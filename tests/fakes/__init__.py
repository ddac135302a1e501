"""Fakes of the outside world for tests: an OpenAI-compatible HTTP server."""

from .openai_server import (
    Delay,
    Drop,
    FakeOpenAIServer,
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
    "RecordedRequest",
    "Reply",
    "Status",
]
