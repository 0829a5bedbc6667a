"""SqlChatScopeRepository: the chat types messages declared one-to-one (SM-26), persisted and shared.

When no adapter instance declares a chat type's scope, the first message that declares it one-to-one
makes it so for its platform (``PlatformRegistry.note_message_declaration``). A row per (platform,
chat type) keeps that for a restart and for every other process on the same database; on PostgreSQL
each write also notifies the others (``core.store.change_feed``). Rows are never removed: a
declaration, once made, stands (as it did in one process's memory).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Column, Connection, Double, String, Table, select
from sqlalchemy.ext.asyncio import AsyncEngine

from core.store.db import metadata, upsert_insert

learned_chat_scopes_table = Table(
    "learned_chat_scopes",
    metadata,
    Column("platform", String(128), primary_key=True),
    Column("chat_type", String(128), primary_key=True),
    Column("learned_at", Double, nullable=False),
)


class SqlChatScopeRepository:
    """(platform, chat type) pairs declared one-to-one, on SQLAlchemy async (SQLite or PostgreSQL).

    ``on_write`` (optional) runs inside each write's transaction, e.g. to notify other processes.
    """

    def __init__(self, engine: AsyncEngine, on_write: Callable[[Connection], None] | None = None) -> None:
        self._engine = engine
        self._on_write = on_write

    async def load(self) -> set[tuple[str, str]]:
        """Every stored pair."""
        t = learned_chat_scopes_table
        async with self._engine.connect() as conn:
            rows = (await conn.execute(select(t.c.platform, t.c.chat_type))).all()
        return {(str(r[0]), str(r[1])) for r in rows}

    async def add(self, platform: str, chat_type: str) -> None:
        """Store a pair (a pair stored already stays as it is)."""
        async with self._engine.begin() as conn:
            await conn.run_sync(self._add, platform, chat_type)

    def _add(self, conn: Connection, platform: str, chat_type: str) -> None:
        dialect_insert = upsert_insert(conn.dialect.name)
        values = {"platform": platform, "chat_type": chat_type, "learned_at": time.time()}
        result = conn.execute(dialect_insert(learned_chat_scopes_table).values(values).on_conflict_do_nothing())
        if result.rowcount and self._on_write is not None:
            self._on_write(conn)
