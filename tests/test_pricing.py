"""The price table: lookups, snapshot names, overrides and unknown models."""

from __future__ import annotations

import pytest

from kernelevo.errors import ConfigError
from kernelevo.llm.pricing import DEFAULT_PRICES, UNKNOWN_PRICE, Price, PriceTable, lookup_price


def test_exact_name():
    assert lookup_price("gpt-4o") == Price(2.50, 10.00)


@pytest.mark.parametrize(
    "model, base",
    [
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),  # the longer known name wins
        ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet"),
        ("claude-3-5-sonnet-latest", "claude-3-5-sonnet"),
        ("claude-sonnet-4@20250514", "claude-sonnet-4"),
        ("anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet"),
        ("gemini-2.0-flash-001", "gemini-2.0-flash"),
        ("openai/gpt-4.1-mini", "gpt-4.1-mini"),
        ("openrouter/openai/gpt-4o", "gpt-4o"),
    ],
)
def test_snapshots_and_vendor_prefixes_share_the_base_price(model, base):
    assert lookup_price(model) == Price(*DEFAULT_PRICES[base])


@pytest.mark.parametrize("model", ["gpt-5-pro", "gpt-4o-realtime-preview", "llama-3.1-70b", ""])
def test_other_models_are_unknown_not_guessed(model):
    price = lookup_price(model)
    assert price == UNKNOWN_PRICE and not price.known
    assert price.cost_usd(10**6, 10**6) == 0.0


def test_cost_is_per_million_tokens():
    assert Price(3.0, 15.0).cost_usd(2_000_000, 100_000) == pytest.approx(6.0 + 1.5)


def test_overrides_add_and_replace_prices():
    overrides = {"my-vllm-model": [0, 0], "gpt-4o": {"input": 1, "output": 2}}
    table = PriceTable.with_overrides(overrides)
    assert table.lookup("my-vllm-model") == Price(0.0, 0.0) and table.lookup("my-vllm-model").known
    assert table.lookup("gpt-4o-2024-08-06") == Price(1.0, 2.0)
    assert table.lookup("gpt-4o-mini") == Price(*DEFAULT_PRICES["gpt-4o-mini"])


@pytest.mark.parametrize(
    "value", [3.0, [1.0], [1.0, -2.0], ["1", "2"], {"input": 1}, {"in": 1, "out": 2}, [True, 1]]
)
def test_bad_override_names_the_model_and_the_fix(value):
    with pytest.raises(ConfigError, match="'odd-model'.*USD per million"):
        PriceTable.with_overrides({"odd-model": value})
