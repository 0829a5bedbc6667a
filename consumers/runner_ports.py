"""The ports a session's TurnRunner talks through: the engine-session opener and the session manager."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from consumers.known_tails import KnownTails
from core.engine import JournalReadAhead, Session, SessionOptions
from core.sessions.records import OriginChat, SessionRecord


class EngineOpener(Protocol):
    """Opens engine sessions, fresh or from a checkpoint snapshot."""

    async def open(
        self, session_id: str, restored: dict[str, Any] | None, *, generation: int,
        options: SessionOptions | None = None, chat: dict[str, Any] | None = None, new: bool = False,
        known_tail: bool = False, read_ahead: asyncio.Future[JournalReadAhead] | None = None,
    ) -> Session: ...

    @property
    def tails(self) -> KnownTails: ...

    def read_ahead(self, session_id: str, generation: int) -> asyncio.Future[JournalReadAhead] | None: ...

    def pop_created(self, session_id: str) -> bool: ...

    async def clear(self, session_id: str, *, before_generation: int | None = None) -> None: ...


class SessionRecords(Protocol):
    """What the runner needs from the session manager (turn bookkeeping, generations)."""

    def generation_of(self, session_id: str) -> int: ...

    def get_session(self, session_id: str) -> SessionRecord | None: ...

    async def complete_session(self, session_id: str, result: str | None = None) -> Any: ...

    async def turn_started(self, session_id: str) -> Any: ...

    async def turn_ended(
        self, session_id: str, outcome: str, error: str | None, ended_at: float, usage: tuple[int, int] | None = None
    ) -> Any: ...

    def turn_started_behind(self, session_id: str) -> asyncio.Future[None] | None: ...

    def turn_ended_behind(
        self, session_id: str, outcome: str, error: str | None, ended_at: float, usage: tuple[int, int] | None = None
    ) -> asyncio.Future[None] | None: ...

    def origin_chat_of(self, session_id: str) -> OriginChat | None: ...
