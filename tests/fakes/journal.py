"""An in-memory ``GenerationalJournal`` for tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from core.engine.journal import EntryKind, JournalEntry
from core.errors import Conflict


class InMemoryJournal:
    """A journal in a dict, for unit tests and single-process embedding (generation 0 by default)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, int], list[JournalEntry]] = {}
        self._lock = asyncio.Lock()
        self.append_calls = 0

    async def append(self, session_id: str, entries: list[JournalEntry], *, generation: int = 0) -> None:
        """Append atomically; refuse seqs that are already taken."""
        async with self._lock:
            existing = self._entries.setdefault((session_id, generation), [])
            taken = {e.seq for e in existing}
            clash = [e.seq for e in entries if e.seq in taken]
            if clash:
                raise Conflict(f"journal of {session_id!r} already holds seq {clash[0]}")
            existing.extend(entries)
            existing.sort(key=lambda e: e.seq)
            self.append_calls += 1

    async def load(self, session_id: str, *, generation: int = 0, from_seq: int = 0) -> list[JournalEntry]:
        """Entries of ``generation`` with ``seq >= from_seq`` in seq order."""
        return [e for e in self._entries.get((session_id, generation), []) if e.seq >= from_seq]

    async def clear(self, session_id: str, *, before_generation: int | None = None) -> None:
        """Forget the session's generations older than ``before_generation`` (None: all)."""
        for key in [k for k in self._entries if k[0] == session_id]:
            if before_generation is None or key[1] < before_generation:
                del self._entries[key]

    async def clear_older(self, generations: Sequence[tuple[str, int]]) -> None:
        """Per ``(session_id, generation)``: forget that session's older generations."""
        for session_id, generation in generations:
            await self.clear(session_id, before_generation=generation)

    async def entries_for_event(
        self, session_id: str, external_event_id: str, kinds: Sequence[EntryKind], *, generation: int = 0
    ) -> list[JournalEntry]:
        """Entries of ``generation`` and ``kinds`` tied to the event, in seq order."""
        return [
            e for e in self._entries.get((session_id, generation), [])
            if e.external_event_id == external_event_id and e.kind in kinds
        ]

    async def event_ids(self, session_id: str, *, generation: int = 0) -> set[str]:
        """Event ids of ``generation``'s entries (exactly those: the port allows a superset)."""
        entries = self._entries.get((session_id, generation), [])
        return {e.external_event_id for e in entries if e.external_event_id}

    def truncate_after(self, session_id: str, seq: int, *, generation: int = 0) -> None:
        """Test helper: drop entries with ``seq`` greater than ``seq`` (simulates lost writes)."""
        key = (session_id, generation)
        self._entries[key] = [e for e in self._entries.get(key, []) if e.seq <= seq]
