"""One candidate in full, for its page: source, parent, verdict, LLM calls, lineage."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelevo.report.data import call_modes, reference_source, run_database
from kernelevo.report.lineage import MAX_LINEAGE_STEPS, LineageStep, lineage
from kernelevo.store.lock import status_now
from kernelevo.store.run_store import LlmCall, RunStore, StoredCandidate


@dataclass(frozen=True)
class CandidateDetail:
    """A candidate with what it came from and what it cost."""

    run_id: str
    task_name: str
    run_status: str
    stored: StoredCandidate
    parent: StoredCandidate | None
    reference_source: str
    calls: tuple[LlmCall, ...]
    lineage: tuple[LineageStep, ...]

    @property
    def tokens(self) -> int:
        return sum(call.input_tokens + call.output_tokens for call in self.calls)

    @property
    def cost_usd(self) -> float:
        return sum(call.cost_usd for call in self.calls)


def load_candidate_detail(run_path: Path, candidate_id: str) -> CandidateDetail:
    """Read one candidate; raises StoreError when the run has no such candidate."""
    # Only this candidate's line of ancestors and their calls are read in
    # full, whatever the run's size.
    with RunStore.read(run_database(Path(run_path))) as store:
        info = store.run_info()
        stored = store.candidate(candidate_id)
        chain = store.ancestry(candidate_id, MAX_LINEAGE_STEPS)
        calls = store.llm_calls_of(chain)
        reference = reference_source(store, store.briefs.baseline(), info.task_source)
    parents = stored.candidate.parent_ids
    return CandidateDetail(
        run_id=info.id, task_name=info.task_name,
        run_status=status_now(info.status, run_database(Path(run_path)).parent), stored=stored,
        parent=chain.get(parents[0]) if parents else None, reference_source=reference,
        calls=tuple(call for call in calls if call.candidate_id == candidate_id),
        lineage=lineage(chain, candidate_id, call_modes(calls)))


def prompt_messages(call: LlmCall) -> list[dict[str, str]]:
    """The chat messages of a call's prompt as {'role', 'content'}, whatever was stored."""
    prompt = call.prompt
    messages = prompt.get("messages") if isinstance(prompt, dict) else prompt
    if not isinstance(messages, list):
        return [{"role": "prompt", "content": str(prompt)}]
    return [{"role": str(m.get("role", "")), "content": str(m.get("content", ""))}
            if isinstance(m, dict) else {"role": "", "content": str(m)} for m in messages]
