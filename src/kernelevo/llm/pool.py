"""Several models behind one client: weighted choice, a cap on requests in flight, a budget.

The pool is itself an LLMClient, so the search loop asks it for a completion
and never learns which model answered until it reads `Completion.model`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

from kernelevo.budget import Budget, BudgetExhausted, Reservation
from kernelevo.errors import ConfigError
from kernelevo.llm.openai_compat import ClientConfig, OpenAICompatClient
from kernelevo.llm.pricing import UNKNOWN_PRICE, Price, PriceTable
from kernelevo.llm.protocol import Completion, LLMClient

# Chat formats add a few special tokens around each message.
_TOKENS_PER_MESSAGE_OVERHEAD = 16


@dataclass(frozen=True)
class PoolMember:
    """One model in the pool: its client, its share of calls and its price."""

    name: str
    client: LLMClient
    weight: float
    price: Price = UNKNOWN_PRICE


def input_token_bound(messages: list[dict]) -> int:
    """An upper bound on the input tokens of `messages`.

    Byte-level BPE tokenizers never emit more tokens than there are bytes,
    so the UTF-8 length bounds every tokenizer we know of; budgets need a
    bound that holds, not an estimate.
    """
    total = 0
    for message in messages:
        total += _TOKENS_PER_MESSAGE_OVERHEAD
        total += len(str(message.get("role", "")).encode())
        total += len(str(message.get("content", "")).encode())
    return total


class ModelPool:
    """Picks a model by weight for each call, caps calls in flight, keeps the budget."""

    def __init__(
        self,
        members: Sequence[PoolMember],
        *,
        max_in_flight: int = 8,
        seed: int | None = 0,
        budget: Budget | None = None,
    ) -> None:
        if not members:
            raise ConfigError("the model pool is empty: configure at least one model")
        bad = [m.name for m in members if not m.weight > 0]
        if bad:
            raise ConfigError(f"models {bad} have weight <= 0: give each a weight > 0")
        if max_in_flight < 1:
            raise ConfigError(f"max_in_flight is {max_in_flight}: give 1 or more")
        self.members = tuple(members)
        self.budget = budget
        self._rng = random.Random(seed)
        self._in_flight = asyncio.Semaphore(max_in_flight)

    @classmethod
    def from_models(
        cls,
        base: ClientConfig,
        weights: Mapping[str, float],
        *,
        prices: PriceTable | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_in_flight: int = 8,
        seed: int | None = 0,
        budget: Budget | None = None,
    ) -> ModelPool:
        """One OpenAICompatClient per model name in `weights`, sharing `base`'s settings."""
        table = prices or PriceTable.with_overrides()
        rng = random.Random(seed)
        members = []
        for model, weight in weights.items():
            config = dataclasses.replace(base, model=model)
            price = table.lookup(model)
            client = OpenAICompatClient(
                config, price=price, transport=transport, rng=random.Random(rng.random())
            )
            members.append(PoolMember(model, client, weight, price))
        return cls(members, max_in_flight=max_in_flight, seed=seed, budget=budget)

    def pick(self) -> PoolMember:
        """One member, chosen with probability proportional to its weight."""
        return self._rng.choices(self.members, weights=[m.weight for m in self.members])[0]

    async def complete(
        self, messages: list[dict], *, max_tokens: int, member: PoolMember | None = None
    ) -> Completion:
        """Answer with `member`, or one chosen by weight; BudgetExhausted when it cannot fit."""
        member = member or self.pick()
        async with self._in_flight:
            # Reserve only once a slot is free, so waiting calls hold no budget.
            reservation = self._reserve(messages, max_tokens, member.price)
            try:
                completion = await member.client.complete(messages, max_tokens=max_tokens)
            except BaseException:
                # Failed attempts report no usage; most providers bill none.
                if reservation is not None:
                    self.budget.release(reservation)
                raise
            if reservation is not None:
                self.budget.settle(
                    reservation,
                    completion.input_tokens,
                    completion.output_tokens,
                    completion.cost_usd,
                )
            return completion

    def _reserve(self, messages: list[dict], max_tokens: int, price: Price) -> Reservation | None:
        if self.budget is None:
            return None
        input_bound = input_token_bound(messages)
        reservation = self.budget.reserve(input_bound, max_tokens, price)
        if reservation is None:
            usage = self.budget.usage()
            reason = self.budget.exhausted() or (
                f"its worst case of {input_bound + max_tokens:,} tokens "
                f"({price.cost_usd(input_bound, max_tokens):.4f} USD) could cross the budget "
                f"with {usage.tokens:,} tokens and {usage.cost_usd:.4f} USD spent and "
                f"{usage.reserved_tokens:,} tokens reserved"
            )
            raise BudgetExhausted(f"no LLM call issued: {reason}")
        return reservation

    async def aclose(self) -> None:
        """Close every member's client that can be closed."""
        for member in self.members:
            close = getattr(member.client, "aclose", None)
            if close is not None:
                await close()
