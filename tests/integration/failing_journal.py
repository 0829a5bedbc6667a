"""A test double of the HistoryJournal port: appends carrying a marker text fail."""

from __future__ import annotations

from collections.abc import Callable

import orjson

from core.engine.journal import HistoryJournal, JournalEntry


class FailingJournal:
    """Wraps a real journal; an append whose entries mention ``marker`` raises ``error()``
    (the first ``times`` such appends; ``None``: every one). Everything else goes through."""

    def __init__(
        self, inner: HistoryJournal, marker: str, error: Callable[[], Exception], times: int | None = None
    ) -> None:
        self.inner = inner
        self.marker = marker.encode()
        self.error = error
        self.times = times
        self.failures = 0

    async def append(self, session_id: str, entries: list[JournalEntry]) -> None:
        hit = any(self.marker in orjson.dumps(e.payload) for e in entries)
        if hit and (self.times is None or self.failures < self.times):
            self.failures += 1
            raise self.error()
        await self.inner.append(session_id, entries)

    async def load(self, session_id: str) -> list[JournalEntry]:
        return await self.inner.load(session_id)

    async def clear(self, session_id: str) -> None:
        await self.inner.clear(session_id)

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()
