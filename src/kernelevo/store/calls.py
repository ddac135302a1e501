"""A run's LLM calls: each recorded before it is sent, then finished, failed or linked.

A call's worst-case price (`cost_bound_usd`) is written before the request
goes out, so a run killed mid-call is charged that bound on resume
(`settle_interrupted_llm_calls`), never less than the provider may bill.
RunStore takes these methods from `LlmCallLog`; they use its database.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from kernelevo.store.records import LlmCall, llm_call_from_row
from kernelevo.store.rows import dumps, require_row
from kernelevo.store.schema import Database

INTERRUPTED_CALL_ERROR = "interrupted: the run stopped before the reply was recorded"


class LlmCallLog:
    """The LLM-call part of RunStore."""

    _database: Database

    def start_llm_call(
        self,
        model: str,
        prompt: Any,
        *,
        max_output_tokens: int | None = None,
        cost_bound_usd: float | None = None,
    ) -> int:
        """Record a request before it is sent; `cost_bound_usd` is its worst-case price."""
        with self._database.transaction() as db:
            cursor = db.execute(
                "INSERT INTO llm_call (model, prompt_json, max_output_tokens, cost_bound_usd,"
                " started_at, state) VALUES (?, ?, ?, ?, ?, 'started')",
                (model, dumps(prompt), max_output_tokens, cost_bound_usd, time.time()),
            )
            assert cursor.lastrowid is not None  # an INSERT sets it
            return cursor.lastrowid

    def finish_llm_call(
        self,
        call_id: int,
        response_text: str,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float,
        latency_s: float,
        candidate_id: str | None = None,
        note: str = "",
    ) -> None:
        """Record the reply, the tokens and dollars it is charged, and a `note` if an estimate."""
        with self._database.transaction() as db:
            # A finished call's `error` holds the note: why its tokens are an estimate.
            cursor = db.execute(
                "UPDATE llm_call SET state = 'finished', response_text = ?, input_tokens = ?,"
                " output_tokens = ?, cost_usd = ?, latency_s = ?, candidate_id = ?,"
                " finished_at = ?, error = ? WHERE id = ? AND state = 'started'",
                (response_text, input_tokens, output_tokens, cost_usd, latency_s,
                 candidate_id, time.time(), note or None, call_id),
            )
            require_row(cursor, "started LLM call", call_id)

    def link_llm_call(self, call_id: int, candidate_id: str) -> None:
        """Attach a finished call to the candidate parsed from its reply."""
        with self._database.transaction() as db:
            cursor = db.execute(
                "UPDATE llm_call SET candidate_id = ? WHERE id = ?", (candidate_id, call_id)
            )
            require_row(cursor, "LLM call", call_id)

    def fail_llm_call(
        self,
        call_id: int,
        error: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd: float = 0.0,
        response_text: str | None = None,
    ) -> None:
        """Record a failed call and what it is charged (a worst case: an estimate).

        `response_text` is given for a call the server answered unusably (an
        empty answer, ""): its tokens are then the usage the server reported,
        billed, not an estimate (store_tally).
        """
        with self._database.transaction() as db:
            cursor = db.execute(
                "UPDATE llm_call SET state = 'failed', error = ?, input_tokens = ?,"
                " output_tokens = ?, cost_usd = ?, finished_at = ?, response_text = ?"
                " WHERE id = ? AND state = 'started'",
                (error, input_tokens, output_tokens, cost_usd, time.time(), response_text,
                 call_id),
            )
            require_row(cursor, "started LLM call", call_id)

    def llm_calls(self, state: str | None = None) -> list[LlmCall]:
        if state is None:
            rows = self._database.query("SELECT * FROM llm_call ORDER BY id")
        else:
            rows = self._database.query(
                "SELECT * FROM llm_call WHERE state = ? ORDER BY id", (state,)
            )
        return [llm_call_from_row(row) for row in rows]

    def llm_calls_of(self, candidate_ids: Iterable[str]) -> list[LlmCall]:
        """The calls linked to these candidates, in order, with prompts and replies."""
        rows = self._database.query(
            "SELECT * FROM llm_call WHERE candidate_id IN (SELECT value FROM json_each(?))"
            " ORDER BY id", (json.dumps(list(candidate_ids)),))
        return [llm_call_from_row(row) for row in rows]

    def llm_modes_of(self, candidate_ids: Iterable[str]) -> dict[str, str]:
        """Each candidate's proposal mode, from the last call linked to it (report.call_mode).

        Only the prompt's `mode` is read: no reply (stored after the prompt in
        each row, so its pages stay unread) and no call object is made.
        """
        rows = self._database.query(
            "SELECT candidate_id, json_extract(prompt_json, '$.mode') FROM llm_call"
            " WHERE candidate_id IN (SELECT value FROM json_each(?)) ORDER BY id",
            (json.dumps(list(candidate_ids)),))
        return {row[0]: "" if row[1] is None else str(row[1]) for row in rows}

    def interrupted_llm_calls(self) -> list[LlmCall]:
        """Calls still 'started': in flight now, or cut off by a crash if read on resume."""
        return self.llm_calls("started")

    def settle_interrupted_llm_calls(self) -> float:
        """On resume only: fail every started call, charged at its bound; returns dollars.

        Input tokens are the prompt's own `max_input_tokens` where the caller
        recorded one, else the prompt's JSON length in bytes, which bounds them too.
        """
        with self._database.transaction() as db:
            row = db.execute(
                "SELECT COALESCE(SUM(cost_bound_usd), 0) FROM llm_call WHERE state = 'started'"
            ).fetchone()
            # The provider may have billed the full reply, so count the worst case as paid.
            db.execute(
                "UPDATE llm_call SET state = 'failed', error = ?, finished_at = ?,"
                " input_tokens = COALESCE(json_extract(prompt_json, '$.max_input_tokens'),"
                " length(CAST(prompt_json AS BLOB))),"
                " output_tokens = COALESCE(max_output_tokens, 0),"
                " cost_usd = COALESCE(cost_bound_usd, 0) WHERE state = 'started'",
                (INTERRUPTED_CALL_ERROR, time.time()),
            )
        return float(row[0])
