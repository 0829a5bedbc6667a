"""A test double of the journal port whose append can be held until the test releases it."""

from __future__ import annotations

import asyncio
from typing import Any

from core.engine import EntryKind, JournalEntry


class HeldJournal:
    """Wraps the service's journal; the first append of ``session_id`` that holds an entry of
    ``kind`` waits for ``release`` before it is written (a write still in flight)."""

    def __init__(self, inner: Any, session_id: str, kind: EntryKind) -> None:
        self._inner = inner
        self._session_id = session_id
        self._kind = kind
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self.landed = asyncio.Event()
        self._armed = True

    async def append(self, session_id: str, entries: list[JournalEntry], **kw: Any) -> None:
        if self._armed and session_id == self._session_id and any(e.kind == self._kind for e in entries):
            self._armed = False
            self.held.set()
            await self.release.wait()
            try:
                await self._inner.append(session_id, entries, **kw)
            finally:
                self.landed.set()
            return
        await self._inner.append(session_id, entries, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
