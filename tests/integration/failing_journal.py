"""A test double of the HistoryJournal port: appends carrying a marker text fail."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from core.engine.journal import GenerationalJournal, JournalEntry


class FailingJournal:
    """Wraps a real journal; an append whose entries mention ``marker`` raises ``error()``
    (the first ``times`` such appends; ``None``: every one). Everything else goes through."""

    def __init__(
        self, inner: GenerationalJournal, marker: str, error: Callable[[], Exception], times: int | None = None
    ) -> None:
        self.inner = inner
        self.marker = marker.encode()
        self.error = error
        self.times = times
        self.failures = 0

    async def append(self, session_id: str, entries: list[JournalEntry], **kw: Any) -> None:
        hit = any(self.marker in orjson.dumps(e.payload) for e in entries)
        if hit and (self.times is None or self.failures < self.times):
            self.failures += 1
            raise self.error()
        await self.inner.append(session_id, entries, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # load, clear, lookups, aclose: the real journal's
