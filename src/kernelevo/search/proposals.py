"""LLM proposals: a prompt from a parent and its inspirations, a call, a parsed candidate.

Every call is recorded in the store before it is sent (with its worst-case
price, so a crash mid-call is still accounted) and finished with its tokens
and cost. An answer that cannot be parsed is a recorded failure whose reason
goes back to the model the next time that parent is chosen.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from kernelevo.candidate import Candidate
from kernelevo.llm.pool import ModelPool, input_token_bound
from kernelevo.propose.parse import parse_answer
from kernelevo.propose.prompt import Exemplar, PromptRequest, build_messages, choose_mode
from kernelevo.store import RunStore


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
                 diff_probability: float = 0.5, gpu_name: str = "NVIDIA H200") -> None:
        self.pool, self.store = pool, store
        self.task_source, self.backend, self.precision = task_source, backend, precision
        self.max_output_tokens = max_output_tokens
        self.rng = rng
        self.diff_probability = diff_probability
        self.gpu_name = gpu_name
        self.parse_errors: dict[str, str] = {}

    async def propose(self, parent: Any, inspirations: list[Any], repair: bool) -> Proposal:
        mode = "repair" if repair else choose_mode(parent.verdict, self.rng,
                                                   self.diff_probability)
        if parent.candidate.backend not in ("triton", "cuda"):
            mode = "rewrite"  # the seed is plain PyTorch: the first kernels are written whole
        request = PromptRequest(
            task_source=self.task_source, backend=self.backend, precision=self.precision,
            mode=mode, parent=_exemplar(parent, self.parse_errors.get(parent.id)),
            inspirations=tuple(_exemplar(i) for i in inspirations), gpu_name=self.gpu_name)
        messages = build_messages(request)
        member = self.pool.pick()
        bound = member.price.cost_usd(input_token_bound(messages), self.max_output_tokens)
        call_id = self.store.start_llm_call(member.name, {"mode": mode, "parent": parent.id,
                                                          "messages": messages},
                                            max_output_tokens=self.max_output_tokens,
                                            cost_bound_usd=bound)
        try:
            completion = await self.pool.complete(messages, max_tokens=self.max_output_tokens,
                                                  member=member)
        except BaseException as exc:
            self.store.fail_llm_call(call_id, f"{type(exc).__name__}: {exc}"[:2000])
            raise
        self.store.finish_llm_call(call_id, completion.text, completion.input_tokens,
                                   completion.output_tokens, completion.cost_usd,
                                   completion.latency_s)
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


def _exemplar(stored: Any, parse_error: str | None = None) -> Exemplar:
    verdict = stored.verdict
    if parse_error:
        # The model's last answer for this parent could not be used: say why.
        from dataclasses import replace

        note = f"your previous answer for this parent could not be used: {parse_error}"
        verdict = replace(verdict, notes=verdict.notes + (note,)) if verdict else None
    return Exemplar(candidate_id=stored.id, source=stored.candidate.source, verdict=verdict)
