"""LLM access: the client seam, an OpenAI-compatible client, prices and a model pool."""

from kernelevo.errors import LLMEmptyAnswer, LLMError, LLMRequestError, LLMUnavailable
from kernelevo.llm.breaker import CircuitBreaker
from kernelevo.llm.openai_compat import ClientConfig, OpenAICompatClient
from kernelevo.llm.pool import ModelPool, PoolMember, input_token_bound
from kernelevo.llm.pricing import DEFAULT_PRICES, UNKNOWN_PRICE, Price, PriceTable, lookup_price
from kernelevo.llm.protocol import Attempt, CallStart, Completion, LLMClient, estimate_tokens

__all__ = [
    "DEFAULT_PRICES",
    "UNKNOWN_PRICE",
    "Attempt",
    "CallStart",
    "CircuitBreaker",
    "ClientConfig",
    "Completion",
    "LLMClient",
    "LLMEmptyAnswer",
    "LLMError",
    "LLMRequestError",
    "LLMUnavailable",
    "ModelPool",
    "OpenAICompatClient",
    "PoolMember",
    "Price",
    "PriceTable",
    "estimate_tokens",
    "input_token_bound",
    "lookup_price",
]
