"""Prices of models in USD per million tokens, for the dollar ledger and budgets.

The table holds public list prices of a few well-known models; anything else
(a local vLLM model, a new release) is priced by the user's config. An unknown
model costs 0 and says so, so the CLI can warn that dollars are not tracked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelevo.errors import ConfigError

TOKENS_PER_MILLION = 1_000_000

# model -> (usd_per_million_input, usd_per_million_output); list prices for
# standard (non-batch, non-cached) requests.
DEFAULT_PRICES: Mapping[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
    "claude-3-5-sonnet": (3.00, 15.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "gemini-2.0-flash": (0.10, 0.40),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-pro": (1.25, 10.00),
}

# A known name followed only by a snapshot tag (a date, "latest", a short
# version) is the same model at the same price. Anything else after the name,
# e.g. "gpt-5-pro" after "gpt-5", is a different model and must not inherit
# its price, so prefixes only match these suffixes.
_SNAPSHOT_SUFFIX = re.compile(
    r"[-@:](\d{4}-\d{2}-\d{2}|\d{8}|\d{3}|latest|v\d+(:\d+)?)(-v\d+(:\d+)?)?$"
)
# Routers and clouds prefix the vendor: "openai/gpt-4o", "anthropic.claude-...".
_VENDOR_PREFIX = re.compile(r"^(([\w.-]+/)+|anthropic\.|openai\.)")


@dataclass(frozen=True)
class Price:
    """USD per million input and output tokens; `known` is False for a guessed 0."""

    usd_per_million_input: float
    usd_per_million_output: float
    known: bool = True

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float:
        """Cost in USD of a call with these token counts."""
        return (
            input_tokens * self.usd_per_million_input
            + output_tokens * self.usd_per_million_output
        ) / TOKENS_PER_MILLION


UNKNOWN_PRICE = Price(0.0, 0.0, known=False)


@dataclass(frozen=True)
class PriceTable:
    """The default prices merged with the user's overrides."""

    prices: Mapping[str, Price]

    @classmethod
    def with_overrides(cls, overrides: Mapping[str, Any] | None = None) -> PriceTable:
        """Defaults plus `overrides` (model -> [input, output] or {input, output} USD/M)."""
        prices = {name: Price(*pair) for name, pair in DEFAULT_PRICES.items()}
        for name, value in (overrides or {}).items():
            prices[name] = _parse_override(name, value)
        return cls(prices)

    def lookup(self, model: str) -> Price:
        """The price of `model`: exact name, then a known name plus snapshot tag."""
        for name in (model, _VENDOR_PREFIX.sub("", model)):
            if name in self.prices:
                return self.prices[name]
            base = _SNAPSHOT_SUFFIX.sub("", name)
            if base != name and base in self.prices:
                return self.prices[base]
        return UNKNOWN_PRICE


def lookup_price(model: str, overrides: Mapping[str, Any] | None = None) -> Price:
    """The price of `model` under the defaults and `overrides`."""
    return PriceTable.with_overrides(overrides).lookup(model)


def _parse_override(model: str, value: Any) -> Price:
    if isinstance(value, Mapping):
        if set(value) != {"input", "output"}:
            raise ConfigError(
                f"price of {model!r} has keys {sorted(value)}: "
                "give {input = USD per million, output = USD per million}"
            )
        pair = (value["input"], value["output"])
    elif isinstance(value, (list, tuple)) and len(value) == 2:
        pair = tuple(value)
    else:
        raise ConfigError(
            f"price of {model!r} is {value!r}: give [input, output] in USD per million tokens"
        )
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in pair):
        raise ConfigError(
            f"price of {model!r} is {value!r}: both prices must be numbers >= 0 "
            "(USD per million tokens)"
        )
    return Price(float(pair[0]), float(pair[1]))
