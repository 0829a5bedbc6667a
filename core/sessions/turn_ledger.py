"""Turn bookkeeping fed by the session worker: running-turn counts, status, last turn, tokens."""

from __future__ import annotations

from core.sessions import turns
from core.sessions.ports import StoreChange
from core.sessions.records import SessionRecord
from core.sessions.writer import PendingEvent, SessionWriter


class TurnLedger:
    """Counts running turns per session and writes SM-13 … SM-16 onto the records."""

    def __init__(self, writer: SessionWriter) -> None:
        self._writer = writer
        self._table = writer.table
        self._running: dict[str, int] = {}

    def running(self, session_id: str) -> int:
        """How many turns of ``session_id`` are running."""
        return self._running.get(session_id, 0)

    async def started(self, session_id: str) -> SessionRecord | None:
        """A turn started: count it and make the session ``active``."""
        async with self._writer.mutation():
            record = self._table.raw(session_id)
            if record is None:
                return None
            self._running[session_id] = self.running(session_id) + 1
            changed = turns.turn_started(record, self._writer.now())
            await self._write(changed, "turn_started")
        return self._table.get(session_id)

    async def ended(
        self, session_id: str, outcome: str | None, error: str | None, ended_at: float | None
    ) -> SessionRecord | None:
        """A turn ended: last_turn, last_reply_at, and the status when it was the last running turn."""
        checked = turns.checked_outcome(outcome)
        async with self._writer.mutation():
            left = max(0, self.running(session_id) - 1)
            if left:
                self._running[session_id] = left
            else:
                self._running.pop(session_id, None)
            record = self._table.raw(session_id)
            if record is None:
                return None
            at = ended_at if ended_at is not None else self._writer.now()
            changed = turns.turn_ended(record, checked, error, at, other_turns_running=left > 0)
            await self._write(changed, "turn_ended")
        return self._table.get(session_id)

    async def usage(self, session_id: str, input_tokens: int, output_tokens: int) -> SessionRecord | None:
        """Add model usage to an existing session (usage never creates one)."""
        async with self._writer.mutation():
            record = self._table.raw(session_id)
            if record is None:
                return None
            await self._write(turns.usage_added(record, input_tokens, output_tokens), "usage")
        return self._table.get(session_id)

    async def _write(self, changed: SessionRecord, why: str) -> None:
        event = PendingEvent(changed.id, "session.updated", {"change": why})
        await self._writer.apply(StoreChange(sessions=(changed,)), [event])
