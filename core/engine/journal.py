"""The durable session history journal: entry model, port, and an in-memory twin.

Every semantic change of a session is one or more journal entries; the session
state is a fold over them (``core.engine.reducer``). Entries are numbered per
session by ``seq`` (0, 1, 2, …); a journal refuses a ``seq`` it already holds
with ``core.errors.Conflict`` so two writers of one session cannot interleave.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from core.errors import Conflict


class EntryKind(StrEnum):
    """What a journal entry records."""

    USER_MESSAGE = "user_message"
    AGENT_MESSAGE = "agent_message"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    NOTICE = "notice"
    OBJECT = "object"
    REPLY = "reply"
    SUMMARY = "summary"
    BOX = "box"
    EVENT = "event"


class JournalEntry(BaseModel):
    """One durable fact of a session's history.

    ``payload`` depends on ``kind`` (see ``core.engine.reducer`` for each shape);
    ``turn_id`` and ``external_event_id`` tie it to the turn and inbound event.
    """

    model_config = ConfigDict(frozen=True)

    seq: int = Field(ge=0)
    kind: EntryKind
    turn_id: str | None = None
    external_event_id: str | None = None
    at: str
    payload: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class HistoryJournal(Protocol):
    """Port: a per-session append-only journal. ``append`` returns once durable."""

    async def append(self, session_id: str, entries: list[JournalEntry]) -> None:
        """Durably append ``entries`` (consecutive seqs) atomically; Conflict on a taken seq."""
        ...

    async def load(self, session_id: str) -> list[JournalEntry]:
        """Every entry of the session in ``seq`` order (empty for an unknown session)."""
        ...

    async def clear(self, session_id: str) -> None:
        """Remove the session's whole history."""
        ...

    async def entries_for_event(
        self, session_id: str, external_event_id: str, kinds: Sequence[EntryKind]
    ) -> list[JournalEntry]:
        """The entries of ``kinds`` tied to ``external_event_id`` in ``seq`` order (KS-14 lookups)."""
        ...

    async def event_ids(self, session_id: str, kinds: Sequence[EntryKind]) -> set[str]:
        """The external event ids the session's entries of ``kinds`` are tied to."""
        ...


class InMemoryJournal:
    """A journal in a dict, for unit tests and single-process embedding."""

    def __init__(self) -> None:
        self._entries: dict[str, list[JournalEntry]] = {}
        self._lock = asyncio.Lock()
        self.append_calls = 0

    async def append(self, session_id: str, entries: list[JournalEntry]) -> None:
        """Append atomically; refuse seqs that are already taken."""
        async with self._lock:
            existing = self._entries.setdefault(session_id, [])
            taken = {e.seq for e in existing}
            clash = [e.seq for e in entries if e.seq in taken]
            if clash:
                raise Conflict(f"journal of {session_id!r} already holds seq {clash[0]}")
            existing.extend(entries)
            existing.sort(key=lambda e: e.seq)
            self.append_calls += 1

    async def load(self, session_id: str) -> list[JournalEntry]:
        """Entries in seq order."""
        return list(self._entries.get(session_id, []))

    async def clear(self, session_id: str) -> None:
        """Forget the session."""
        self._entries.pop(session_id, None)

    async def entries_for_event(
        self, session_id: str, external_event_id: str, kinds: Sequence[EntryKind]
    ) -> list[JournalEntry]:
        """Entries of ``kinds`` tied to the event, in seq order."""
        return [
            e for e in self._entries.get(session_id, [])
            if e.external_event_id == external_event_id and e.kind in kinds
        ]

    async def event_ids(self, session_id: str, kinds: Sequence[EntryKind]) -> set[str]:
        """Event ids of the session's entries of ``kinds``."""
        entries = self._entries.get(session_id, [])
        return {e.external_event_id for e in entries if e.external_event_id and e.kind in kinds}

    def truncate_after(self, session_id: str, seq: int) -> None:
        """Test helper: drop entries with ``seq`` greater than ``seq`` (simulates lost writes)."""
        self._entries[session_id] = [e for e in self._entries.get(session_id, []) if e.seq <= seq]
