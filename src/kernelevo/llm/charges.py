"""What one LLM call is charged: the usage the server reported when it can be true, else a bound.

The budget and the run store both charge a call by these rules, so they agree:
- an answer whose usage lies in [0, the call's worst case], field by field,
  is charged that usage: what the provider billed;
- an answer whose usage lies outside (negative, or more than the prompt's
  bound or max_tokens allow) is charged the call's worst case, with a note:
  a server's numbers cannot drive the budget below zero or past its limit;
- an answer without usage is charged an estimate from its text, with a note;
- an empty answer is a failed call, charged the usage the server reported
  by the rules above (nothing when it reported none);
- a call failed with an error and no usage, or stopped before a request
  reached the server, costs nothing;
- a call one of whose requests went out and got no answer (a timeout, a
  connection dropped, the call cancelled while it waited) is charged its
  worst case once, with a note: the provider may have billed it in full.
A note marks the charge as an estimate; `runs`, `show` and the report keep
estimates apart from billed tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass

from kernelevo.errors import LLMEmptyAnswer
from kernelevo.llm.protocol import CallStart, Completion

CUT_OFF_NOTE = "a request went out and got no answer: charged the call's worst case (an estimate)"
NO_USAGE_NOTE = "the server reported no usage: tokens estimated from the text's length"


@dataclass(frozen=True)
class Charge:
    """Tokens and dollars charged for one call; a `note` says it is an estimate and why."""

    input_tokens: int
    output_tokens: int
    cost_usd: float
    note: str = ""


NOTHING = Charge(0, 0, 0.0)


def worst_case(plan: CallStart, note: str) -> Charge:
    """The call's whole reservation: every input and output token it could have used."""
    return Charge(plan.max_input_tokens, plan.max_output_tokens, plan.cost_bound_usd, note)


def answered(completion: Completion, plan: CallStart) -> Completion:
    """`completion` with the tokens and cost it is charged, and a note if they are a bound."""
    charge = _answer_charge(completion, plan)
    return dataclasses.replace(completion, input_tokens=charge.input_tokens,
                               output_tokens=charge.output_tokens, cost_usd=charge.cost_usd,
                               usage_note=charge.note)


def stopped(plan: CallStart, error: BaseException) -> Charge:
    """The charge of a call that ended in `error` (an LLMError, or cancelled) with no answer."""
    if isinstance(error, asyncio.CancelledError):
        billed = plan.progress.maybe_billed
    else:
        billed = plan.progress.cut_off
    if billed:
        return worst_case(plan, CUT_OFF_NOTE)
    if isinstance(error, LLMEmptyAnswer) and error.usage is not None:
        return _reported(plan, *error.usage)
    return NOTHING


def _answer_charge(completion: Completion, plan: CallStart) -> Charge:
    if plan.progress.cut_off:
        return worst_case(plan, CUT_OFF_NOTE)
    charge = _reported(plan, completion.input_tokens, completion.output_tokens,
                       completion.cost_usd)
    if charge.note or not completion.estimated:
        return charge
    return dataclasses.replace(charge, note=NO_USAGE_NOTE)


def _reported(plan: CallStart, reported_in: int, reported_out: int, cost_usd: float) -> Charge:
    """What the server reported, when the call could have used it; else its worst case."""
    within = (0 <= reported_in <= plan.max_input_tokens
              and 0 <= reported_out <= plan.max_output_tokens)
    if not within:
        return worst_case(plan, (
            f"the server reported {reported_in:,} input and {reported_out:,} output tokens, "
            f"outside what the call could use (0 to {plan.max_input_tokens:,} and 0 to "
            f"{plan.max_output_tokens:,}): charged its worst case (an estimate)"))
    return Charge(reported_in, reported_out, cost_usd)
