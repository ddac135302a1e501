"""Candidates waiting for a judge, most urgent first."""

from __future__ import annotations

import asyncio
import itertools

class JudgeQueue:
    """Candidates waiting for a judge: the LLM's and the seeds' first, tuner variants after.

    A tuner variant costs no tokens and a new elite yields several, so they
    fill time the GPUs would otherwise idle, but never delay a kernel the LLM
    was paid for, nor the verdict its next prompts should learn from.
    """

    def __init__(self) -> None:
        self._items: asyncio.PriorityQueue[tuple[int, int, str]] = asyncio.PriorityQueue()
        self._order = itertools.count()
        self.urgent = 0  # queued candidates that are not tuner variants

    def put(self, candidate_id: str, origin: str) -> None:
        urgent = origin != "tuner"
        self.urgent += urgent
        self._items.put_nowait((0 if urgent else 1, next(self._order), candidate_id))

    async def get(self) -> str:
        rank, _, candidate_id = await self._items.get()
        self.urgent -= rank == 0
        return candidate_id

    def qsize(self) -> int:
        return self._items.qsize()

    def empty(self) -> bool:
        return self._items.empty()
