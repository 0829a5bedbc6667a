"""Turn bookkeeping fed by the session worker: running-turn counts, status, last turn, tokens."""

from __future__ import annotations

import asyncio
import logging

from core.sessions import turn_records
from core.sessions.records import SessionRecord
from core.sessions.writer import SessionWriter

log = logging.getLogger(__name__)


class TurnLedger:
    """Counts running turns per session and writes SM-13 … SM-16 onto the records."""

    def __init__(self, writer: SessionWriter) -> None:
        self._writer = writer
        self._table = writer.table
        self._running: dict[str, int] = {}

    def running(self, session_id: str) -> int:
        """How many turns of ``session_id`` are running."""
        return self._running.get(session_id, 0)

    def started_behind(self, session_id: str) -> asyncio.Future[None] | None:
        """A turn started: count it and make the session ``active``, written behind.

        The returned future settles once the write and its ``session.updated`` are done (None:
        no such session). The worker's hot path holds it instead of awaiting a task per call."""

        def change(record: SessionRecord) -> SessionRecord:
            self._running[session_id] = self.running(session_id) + 1
            return turn_records.turn_started(record, self._writer.now())

        # Lazy: it shares the turn's next journal transaction instead of committing alone. A crash
        # before that loses only what the turn's end (or the next turn's) writes again in full.
        return self._writer.change_behind(session_id, change, "turn_started", lazy=True)

    def ended_behind(
        self, session_id: str, outcome: str | None, error: str | None, ended_at: float | None,
        usage: tuple[int, int] | None = None,
    ) -> asyncio.Future[None] | None:
        """A turn ended: last_turn, last_reply_at, and the status when it was the last running turn.

        ``usage`` (input, output tokens the turn used) is added in the same change, so the turn's
        end and its usage are one record write and one ``session.updated`` (SM-15's event).
        Written behind like ``started_behind``; the turn's end is not lazy: it adds the turn's
        tokens (SM-15), which nothing writes again."""
        checked = turn_records.checked_outcome(outcome)
        left = max(0, self.running(session_id) - 1)
        if left:
            self._running[session_id] = left
        else:
            self._running.pop(session_id, None)
        at = ended_at if ended_at is not None else self._writer.now()

        def change(record: SessionRecord) -> SessionRecord:
            if usage is not None:
                record = turn_records.usage_added(record, *usage)
            return turn_records.turn_ended(record, checked, error, at, other_turns_running=left > 0)

        return self._writer.change_behind(session_id, change, "turn_ended")

    async def started(self, session_id: str) -> SessionRecord | None:
        """``started_behind``, returning the record once its write landed."""
        return await self._landed(session_id, self.started_behind(session_id), "turn_started")

    async def ended(
        self, session_id: str, outcome: str | None, error: str | None, ended_at: float | None,
        usage: tuple[int, int] | None = None,
    ) -> SessionRecord | None:
        """``ended_behind``, returning the record once its write landed."""
        written = self.ended_behind(session_id, outcome, error, ended_at, usage)
        return await self._landed(session_id, written, "turn_ended")

    async def usage(self, session_id: str, input_tokens: int, output_tokens: int) -> SessionRecord | None:
        """Add model usage to an existing session (usage never creates one)."""
        written = self._writer.change_behind(
            session_id, lambda record: turn_records.usage_added(record, input_tokens, output_tokens), "usage"
        )
        return await self._landed(session_id, written, "usage")

    async def _landed(self, session_id: str, written: asyncio.Future[None] | None, why: str) -> SessionRecord | None:
        """Wait for a change's write (and its ``session.updated``); the record as it now is.

        ``session.updated`` is emitted for every change (SM-15 asks it for usage; the turn
        changes carry ``last_turn``/``status`` to watchers), by the writer once the write landed.
        """
        if written is None:
            return None
        try:
            await asyncio.shield(written)
        except Exception as exc:
            log.warning("session %s: %s not persisted yet (%r); the next write carries it", session_id, why, exc)
        return self._table.get(session_id)
