"""Several models behind one client: weighted choice, a cap on requests in flight, a budget.

The pool is itself an LLMClient, so the search loop asks it for a completion
and never learns which model answered until it reads `Completion.model` (or
the `CallStart` given to `on_start` just before the request is sent).

Budget refusals: a call whose worst case does not fit now falls back to the
cheapest other model that fits; when none fits only because of other calls'
reservations, it waits for them to settle instead of giving up. Only a call
that could not fit even with nothing in flight raises BudgetExhausted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import kernelevo.llm.charges as charges
from kernelevo.budget import Budget, Reservation
from kernelevo.errors import BudgetExhausted, ConfigError
from kernelevo.llm.breaker import CircuitBreaker
from kernelevo.llm.openai_compat import ClientConfig, OpenAICompatClient
from kernelevo.llm.pricing import UNKNOWN_PRICE, Price, PriceTable
from kernelevo.llm.protocol import CALL_PROGRESS, CallStart, Completion, LLMClient

if TYPE_CHECKING:  # loaded where a call is made: `eval`, `serve` never need it (0.07 s)
    import httpx

# Chat formats add a few special tokens around each message.
_TOKENS_PER_MESSAGE_OVERHEAD = 16
# How often a call waiting for others' reservations looks again even without
# a settlement: reservations made outside the pool and the wall clock change too.
_BUDGET_RECHECK_S = 1.0


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
        # Replaced on every settlement; waiters hold the one current when they began.
        self._settled = asyncio.Event()

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
        # One endpoint, one breaker: a dead server fails every model's calls alike.
        breaker = CircuitBreaker(base.breaker_failures, base.breaker_min_s, base.give_up_s)
        members = []
        for model, weight in weights.items():
            config = dataclasses.replace(base, model=model)
            price = table.lookup(model)
            client = OpenAICompatClient(config, price=price, transport=transport,
                                        rng=random.Random(rng.random()), breaker=breaker)
            members.append(PoolMember(model, client, weight, price))
        return cls(members, max_in_flight=max_in_flight, seed=seed, budget=budget)

    def pick(self) -> PoolMember:
        """One member, chosen with probability proportional to its weight."""
        return self._rng.choices(self.members, weights=[m.weight for m in self.members])[0]

    async def complete(
        self,
        messages: list[dict],
        *,
        max_tokens: int,
        member: PoolMember | None = None,
        on_start: Callable[[CallStart], None] | None = None,
    ) -> Completion:
        """Answer with `member` (only it), or one chosen by weight that fits the budget.

        `on_start` is called with the chosen model and worst case just before
        the request is sent (e.g. to record it); BudgetExhausted when no model
        can fit even once the calls in flight have settled.
        """
        async with self._in_flight:
            # Reserve only once a slot is free, so waiting calls hold no budget.
            chosen, reservation = await self._reserve(messages, max_tokens, member)
            plan = self._call_start(chosen, messages, max_tokens)
            progress = CALL_PROGRESS.set(plan.progress)
            try:
                if on_start is not None:
                    on_start(plan)
                completion = await chosen.client.complete(messages, max_tokens=max_tokens)
            except BaseException as error:
                # What the provider may have billed (charges.py): nothing unless a
                # request reached it and got no answer.
                self._settle(reservation, charges.stopped(plan, error))
                raise
            finally:
                CALL_PROGRESS.reset(progress)
            completion = charges.answered(completion, plan)
            self._settle(reservation, charges.Charge(completion.input_tokens,
                                                     completion.output_tokens,
                                                     completion.cost_usd))
            return completion

    def _call_start(self, member: PoolMember, messages: list[dict], max_tokens: int) -> CallStart:
        input_bound = input_token_bound(messages)
        return CallStart(member.name, input_bound, max_tokens,
                         member.price.cost_usd(input_bound, max_tokens))

    def _settle(self, reservation: Reservation | None, charge: charges.Charge) -> None:
        if reservation is None or self.budget is None:
            return
        self.budget.settle(reservation, charge.input_tokens, charge.output_tokens,
                           charge.cost_usd)
        self._settled.set()
        self._settled = asyncio.Event()

    async def _reserve(self, messages: list[dict], max_tokens: int,
                       pinned: PoolMember | None) -> tuple[PoolMember, Reservation | None]:
        """A member and its reservation; waits while only others' reservations are in the way."""
        preferred = pinned or self.pick()
        if self.budget is None:
            return preferred, None
        input_bound = input_token_bound(messages)
        order = [preferred] if pinned else self._fallback_order(preferred, input_bound, max_tokens)
        while True:
            settled = self._settled
            for member in order:
                reservation = self.budget.reserve(input_bound, max_tokens, member.price)
                if reservation is not None:
                    return member, reservation
            if not any(self.budget.fits_alone(input_bound, max_tokens, m.price) for m in order):
                raise BudgetExhausted(self._refusal(input_bound, max_tokens, order))
            try:
                await asyncio.wait_for(settled.wait(), _BUDGET_RECHECK_S)
            except asyncio.TimeoutError:
                pass

    def _fallback_order(self, preferred: PoolMember, input_bound: int,
                        max_tokens: int) -> list[PoolMember]:
        """The chosen member first, then the others from the cheapest worst case up."""
        others = sorted((m for m in self.members if m is not preferred),
                        key=lambda m: m.price.cost_usd(input_bound, max_tokens))
        return [preferred, *others]

    def _refusal(self, input_bound: int, max_tokens: int, order: list[PoolMember]) -> str:
        assert self.budget is not None
        usage = self.budget.usage()
        cheapest = min(order, key=lambda m: m.price.cost_usd(input_bound, max_tokens))
        reason = self.budget.exhausted() or (
            f"even with no call in flight, the worst case of {cheapest.name} "
            f"({input_bound + max_tokens:,} tokens, "
            f"{cheapest.price.cost_usd(input_bound, max_tokens):.4f} USD) could cross the "
            f"budget with {usage.tokens:,} tokens and {usage.cost_usd:.4f} USD spent"
        )
        return f"no LLM call issued: {reason}"

    async def aclose(self) -> None:
        """Close every member's client that can be closed."""
        for member in self.members:
            close = getattr(member.client, "aclose", None)
            if close is not None:
                await close()
