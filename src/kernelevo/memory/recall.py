"""Recall: the remembered tasks most like a new one, their best kernels and a bounded
"lessons" text for the prompts.

The lessons hold at most MemoryConfig.lessons_tokens tokens, counted as UTF-8
bytes: byte-level BPE tokenizers never emit more tokens than bytes, so the
bound holds for every model the budget knows (llm/pool.py counts alike).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kernelevo.memory.settings import MemoryConfig
from kernelevo.memory.signature import Signature, similarity
from kernelevo.memory.store import MemoryStore, TaskMemory

LESSON_LINE_CHARS = 240  # one lesson line, diff included


@dataclass(frozen=True)
class RecalledTask:
    key: str
    name: str
    similarity: float


@dataclass(frozen=True)
class RecalledKernel:
    """A remembered kernel: which memory row, from which task, how it was judged there."""

    memory_id: int
    task_key: str
    task_name: str
    similarity: float
    summary: str
    source: str

    @property
    def label(self) -> str:
        return (f"memory kernel {self.memory_id} from {self.task_name} "
                f"({self.similarity:.0%} alike): {self.summary}")


@dataclass(frozen=True)
class Recall:
    """What a run was given from memory; stored in its `memory_recalled` event."""

    tasks: tuple[RecalledTask, ...] = ()
    kernels: tuple[RecalledKernel, ...] = ()
    lessons: str = ""
    lessons_bound_tokens: int = 0

    @property
    def empty(self) -> bool:
        return not (self.kernels or self.lessons)

    def payload(self) -> dict[str, Any]:
        return {"tasks": [asdict(t) for t in self.tasks],
                "kernels": [asdict(k) for k in self.kernels], "lessons": self.lessons,
                "lessons_bytes": len(self.lessons.encode()),
                "lessons_bound_tokens": self.lessons_bound_tokens}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Recall:
        return cls(tuple(RecalledTask(**t) for t in payload.get("tasks", ())),
                   tuple(RecalledKernel(**k) for k in payload.get("kernels", ())),
                   payload.get("lessons", ""), payload.get("lessons_bound_tokens", 0))


def recall(memory: MemoryStore, signature: Signature, config: MemoryConfig) -> Recall:
    """The most similar remembered tasks, their best kernels and lessons, within bounds."""
    scored = sorted(((similarity(signature, task.signature), task) for task in memory.tasks()),
                    key=lambda pair: (-pair[0], -pair[1].last_seen))
    alike = [(score, task) for score, task in scored
             if score >= config.min_similarity][:config.similar_tasks]
    tasks = tuple(RecalledTask(task.key, task.name, score) for score, task in alike)
    return Recall(tasks, _kernels(memory, alike, signature.backend, config),
                  _lessons(memory, alike, config.lessons_tokens), config.lessons_tokens)


def _kernels(memory: MemoryStore, alike: list[tuple[float, TaskMemory]], backend: str,
             config: MemoryConfig) -> tuple[RecalledKernel, ...]:
    """Best kernels of the alike tasks, round robin (each task's best first), no repeats."""
    queues = [[k for k in memory.kernels(task.key, limit=config.kernels + 5)
               if k.backend == backend and len(k.source.encode()) <= config.kernel_max_bytes]
              for _, task in alike]
    chosen: list[RecalledKernel] = []
    hashes: set[str] = set()
    for rank in range(max((len(q) for q in queues), default=0)):
        for (score, task), queue in zip(alike, queues):
            if len(chosen) >= config.kernels or rank >= len(queue) \
                    or queue[rank].source_hash in hashes:
                continue
            kernel = queue[rank]
            hashes.add(kernel.source_hash)
            chosen.append(RecalledKernel(kernel.id, task.key, task.name, score,
                                         _kernel_summary(kernel), kernel.source))
    return tuple(chosen)


def _kernel_summary(kernel: Any) -> str:
    if kernel.speedup is None:
        return "passed there, untimed (judged without a GPU)"
    where = f" on {kernel.gpu}" if kernel.gpu else ""
    return f"passed there, {kernel.speedup:.2f}x vs eager ({kernel.measure or 'time'}){where}"


def _lessons(memory: MemoryStore, alike: list[tuple[float, TaskMemory]],
             bound_tokens: int) -> str:
    """Lesson lines, most similar task first, packed until the next would pass the bound."""
    lines: list[str] = []
    for score, task in alike:
        lines += [_line(f"on {task.name} ({score:.0%} alike), {fix.reason} came "
                        f"{fix.occurrences} time(s); this change fixed it: {_compact(fix.diff)}")
                  for fix in memory.fixes(task.key, limit=3)]
        lines += [_line(f"on {task.name} ({score:.0%} alike), this edit gained "
                        f"{edit.gain:.2f}x: {_compact(edit.diff)}")
                  for edit in memory.edits(task.key, limit=3)]
    kept: list[str] = []
    used = 0
    for line in lines:
        cost = len(line.encode()) + 1
        if used + cost <= bound_tokens:
            kept.append(line)
            used += cost
    return "\n".join(kept)


def _line(text: str) -> str:
    text = "- " + " ".join(text.split())
    return text if len(text) <= LESSON_LINE_CHARS else text[:LESSON_LINE_CHARS - 3] + "..."


def _compact(diff: str) -> str:
    """A diff's changed lines only, stripped and joined: `- old / + new`."""
    changed = [line[0] + " " + line[1:].strip() for line in diff.splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---")) and line[1:].strip()]
    return " / ".join(changed) or "(no line changed)"
