"""One run's use of the memory: recall before it, plant the remembered kernels as starting
candidates, record each new elite as it is judged and the whole run at its end.

Remembered kernels are candidates like any other: planted as seeds, judged
afresh on this task; the memory never sees or changes a verdict before the
judge gives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kernelevo.candidate import Candidate
from kernelevo.errors import MemoryStoreError
from kernelevo.logs import get_logger
from kernelevo.memory.harvest import Recorded, record_run, remember_kernel
from kernelevo.memory.recall import Recall, recall
from kernelevo.memory.settings import MemoryConfig, store_path
from kernelevo.memory.signature import Signature, signature_of, task_key, to_payload
from kernelevo.memory.store import MemoryStore

log = get_logger(__name__)
RECALL_EVENT = "memory_recalled"
RECORD_EVENT = "memory_recorded"
ERROR_EVENT = "memory_error"


@dataclass
class RunMemory:
    """The memory store opened for one task's run, and that task's key and signature."""

    store: MemoryStore
    config: MemoryConfig
    key: str
    name: str
    signature: Signature
    elites_kept: int = 0

    @classmethod
    def open(cls, config: MemoryConfig, task_name: str, task_source: str, precision: str,
             backend: str) -> RunMemory | None:
        """The memory for a run of this task; None when [memory] enabled is false."""
        if not config.enabled:
            return None
        try:
            signature = signature_of(task_source, precision, backend)
        except SyntaxError:
            return None  # the task check reports it; the run fails before memory matters
        return cls(MemoryStore(store_path(config)), config, task_key(task_source), task_name,
                   signature)

    def recall(self) -> Recall:
        return recall(self.store, self.signature, self.config)

    def event(self, remembered: Recall) -> dict[str, Any]:
        """The `memory_recalled` event: the store, this task's signature, what was used."""
        return {"store": str(self.store.path), "task_key": self.key,
                "signature": to_payload(self.signature), **remembered.payload()}

    def on_elite(self, run_id: str) -> Callable[[Any, Any], None]:
        """A callback keeping each new elite that passed; a failing memory only logs."""
        def keep(stored: Any, verdict: Any) -> None:
            try:
                if self.elites_kept == 0:
                    self.store.note_task(self.key, self.name, self.signature)
                self.elites_kept += remember_kernel(self.store, self.key, run_id, stored,
                                                    verdict)
            except MemoryStoreError as exc:
                log.warning("memory: could not keep %s: %s", stored.id, exc)
        return keep

    def record(self, run: Any) -> Recorded:
        return record_run(self.store, run, self.key, self.name, self.signature)

    def close(self) -> None:
        self.store.close()


def memory_seeds(remembered: Recall, known_sources: set[str],
                 backend: str) -> list[Candidate]:
    """The recalled kernels as starting candidates (none already planted), judged afresh."""
    seeds = []
    for kernel in remembered.kernels:
        if kernel.source in known_sources:
            continue
        known_sources.add(kernel.source)
        seeds.append(Candidate(source=kernel.source, backend=backend, origin="seed",
                               name=f"memory {kernel.memory_id} from {kernel.task_name}"))
    return seeds


def describe_recall(remembered: Recall | None) -> str:
    """One line for the console: which remembered tasks, kernels and lessons a run got."""
    if remembered is None or not remembered.tasks:
        return "nothing similar remembered yet"
    tasks = ", ".join(f"{t.name} ({t.similarity:.0%})" for t in remembered.tasks)
    lessons = len(remembered.lessons.splitlines())
    return (f"recalled {tasks}: {len(remembered.kernels)} kernel(s) planted as starting "
            f"candidates, {lessons} lesson line(s) in the prompts")


def memory_use(run: Any) -> dict[str, Any]:
    """What a stored run (a RunStore) got from the memory and gave it; {} with memory off."""
    recalled = run.events(RECALL_EVENT)
    recorded = run.events(RECORD_EVENT)
    if not recalled and not recorded:
        return {}
    given = Recall.from_payload(recalled[-1].payload) if recalled else Recall()
    return {"tasks": [{"name": t.name, "key": t.key, "similarity": t.similarity}
                      for t in given.tasks],
            "kernels": [{"label": k.label, "memory_id": k.memory_id} for k in given.kernels],
            "lessons": given.lessons,
            "store": (recalled or recorded)[-1].payload.get("store", ""),
            "recorded": {key: recorded[-1].payload.get(key, 0)
                         for key in ("kernels", "edits", "fixes")} if recorded else {}}
