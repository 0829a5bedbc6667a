"""Test-only look into the inbox table (the ``Inbox`` port has no counting: the service never counts)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from core.store.inbox import inbox


async def inbox_row_count(db_engine: AsyncEngine, session_id: str | None = None) -> int:
    """How many inbox rows (any status) ``session_id`` has, or all sessions together."""
    query = select(func.count()).select_from(inbox)
    if session_id is not None:
        query = query.where(inbox.c.session_id == session_id)
    async with db_engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


async def inbox_status_in_table(db_engine: AsyncEngine, platform: str, message_id: str) -> str | None:
    """The status row as written (no flush first, unlike ``SqlInbox.status_of``)."""
    query = select(inbox.c.status).where(inbox.c.platform == platform, inbox.c.message_id == message_id)
    async with db_engine.connect() as conn:
        row = (await conn.execute(query)).first()
    return None if row is None else str(row[0])
