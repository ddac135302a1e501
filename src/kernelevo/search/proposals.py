"""LLM proposals: a prompt from a parent and its inspirations, a call, a parsed candidate.

Every call is recorded in the store just before it is sent (with its worst
case in input tokens and dollars, so a crash mid-call is charged that on
resume) and finished with the tokens and cost it is charged (llm/charges.py:
the budget charges the same); every HTTP attempt of it is an `llm_attempt`
event, and a charge that is an estimate (usage the server reported that no
call could use, or none) an `llm_usage_flagged` event. An answer that cannot
be parsed is a recorded failure whose reason goes back to the model the
next time that parent is chosen.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernelevo.candidate import KERNEL_BACKENDS, Candidate
from kernelevo.errors import LLMEmptyAnswer, LLMError
from kernelevo.llm import charges
from kernelevo.llm.protocol import Attempt, CallStart, Completion
from kernelevo.propose.parse import parse_answer
from kernelevo.propose.prompt import (Exemplar, PromptRequest, Remembered, build_messages,
                                      choose_mode)
from kernelevo.store.run_store import RunStore

if TYPE_CHECKING:
    from kernelevo.llm.pool import ModelPool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Proposal:
    """What one proposal attempt produced."""

    candidate: Candidate | None = None
    call_id: int | None = None
    error: str | None = None
    stop: bool = False


class LLMProposer:
    """Turns a parent (and inspirations) into a new candidate through the model pool."""

    def __init__(self, pool: ModelPool, store: RunStore, task_source: str, backend: str,
                 precision: str, max_output_tokens: int, rng: random.Random,
                 diff_probability: float = 0.5, gpu_name: str = "NVIDIA H200",
                 remembered: tuple[Remembered, ...] = (), lessons: str = "",
                 backward: bool = False,
                 tolerance: tuple[float, float] | None = None) -> None:
        self.pool, self.store = pool, store
        self.task_source, self.backend, self.precision = task_source, backend, precision
        self.max_output_tokens = max_output_tokens
        self.rng = rng
        self.diff_probability = diff_probability
        self.gpu_name = gpu_name
        self.parse_errors: dict[str, str] = {}
        self.remembered, self.lessons = remembered, lessons  # from the memory
        self.backward = backward  # the run judges gradients too
        self.tolerance = tolerance  # what the judge holds outputs to, as the prompt states it

    async def propose(self, parent: Any, inspirations: list[Any], repair: bool) -> Proposal:
        mode = "repair" if repair else choose_mode(parent.verdict, self.rng,
                                                   self.diff_probability)
        if parent.candidate.backend not in KERNEL_BACKENDS:
            mode = "rewrite"  # the seed is plain PyTorch: the first kernels are written whole
        request = PromptRequest(
            task_source=self.task_source, backend=self.backend, precision=self.precision,
            mode=mode, parent=_exemplar(parent, self.parse_errors.get(parent.id)),
            inspirations=tuple(_exemplar(i) for i in inspirations), gpu_name=self.gpu_name,
            remembered=self.remembered, lessons=self.lessons, backward=self.backward,
            tolerance=self.tolerance)
        messages = build_messages(request)
        record = _CallRecord(self.store, {"mode": mode, "parent": parent.id,
                                          "messages": messages})
        try:
            completion = await self.pool.complete(messages, max_tokens=self.max_output_tokens,
                                                  on_start=record.start)
        except BaseException as exc:
            record.failed(exc)
            raise
        call_id = record.finished(completion)
        parsed = parse_answer(completion.text, parent.candidate.source, mode)
        if parsed.source is None:
            reason = parsed.error or "the answer held no candidate"
            self.parse_errors[parent.id] = reason
            self.store.log_event("unparsed_answer", {"call": call_id, "parent": parent.id,
                                                     "mode": mode, "reason": reason})
            return Proposal(call_id=call_id, error=reason)
        self.parse_errors.pop(parent.id, None)
        origin = "repair" if mode == "repair" else "llm"
        candidate = Candidate(source=parsed.source, backend=self.backend, name=f"{mode}",
                              origin=origin, parent_ids=(parent.id,))
        return Proposal(candidate=candidate, call_id=call_id)


class _CallRecord:
    """The store's record of one call: started just before sending, then finished or failed."""

    def __init__(self, store: RunStore, prompt: dict[str, Any]) -> None:
        self.store, self.prompt = store, prompt
        self.call_id: int | None = None
        self.plan: CallStart | None = None

    def start(self, plan: CallStart) -> None:
        # max_input_tokens lets a resumed run charge this call its whole worst case.
        self.plan = plan
        self.call_id = self.store.start_llm_call(
            plan.model, {**self.prompt, "max_input_tokens": plan.max_input_tokens},
            max_output_tokens=plan.max_output_tokens, cost_bound_usd=plan.cost_bound_usd)

    def failed(self, error: BaseException) -> None:
        if isinstance(error, LLMError):
            self._attempts(error.attempts)
        if self.call_id is None or self.plan is None:
            return  # never sent: nothing to charge
        # The pool charged the budget by the same rule.
        charge = charges.stopped(self.plan, error)
        message = ("cancelled" if isinstance(error, asyncio.CancelledError)
                   else f"{type(error).__name__}: {error}")
        if charge.note:
            message += f" ({charge.note})"
        # An empty answer's usage, as the server reported it, is billed: no estimate.
        answered = isinstance(error, LLMEmptyAnswer) and not charge.note
        self.store.fail_llm_call(self.call_id, message[-2000:], charge.input_tokens,
                                 charge.output_tokens, charge.cost_usd,
                                 response_text="" if answered else None)

    def finished(self, completion: Completion) -> int:
        assert self.call_id is not None and self.plan is not None, "on_start was not called"
        self.store.finish_llm_call(self.call_id, completion.text, completion.input_tokens,
                                   completion.output_tokens, completion.cost_usd,
                                   completion.latency_s, note=completion.usage_note)
        self._attempts(completion.attempt_log)
        if completion.usage_note:
            self._flag(self.plan, completion)
        return self.call_id

    def _attempts(self, attempts: tuple[Attempt, ...]) -> None:
        for attempt in attempts:
            self.store.log_event("llm_attempt", {
                "call": self.call_id, "model": attempt.model, "attempt": attempt.number,
                "kind": attempt.kind, "status": attempt.status_code, "error": attempt.error,
                "latency_s": round(attempt.latency_s, 3)})

    def _flag(self, plan: CallStart, completion: Completion) -> None:
        log.warning("%s: %s", plan.model, completion.usage_note)
        self.store.log_event("llm_usage_flagged", {
            "call": self.call_id, "model": plan.model, "note": completion.usage_note,
            "charged_tokens": completion.total_tokens, "worst_case_tokens": plan.max_tokens,
            "charged_usd": completion.cost_usd, "worst_case_usd": plan.cost_bound_usd})


def _exemplar(stored: Any, parse_error: str | None = None) -> Exemplar:
    verdict = stored.verdict
    if parse_error:
        # The model's last answer for this parent could not be used: say why.
        from dataclasses import replace

        note = f"your previous answer for this parent could not be used: {parse_error}"
        verdict = replace(verdict, notes=verdict.notes + (note,)) if verdict else None
    return Exemplar(candidate_id=stored.id, source=stored.candidate.source, verdict=verdict)
