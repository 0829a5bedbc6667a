"""Make the service's real database refuse writes for a while (SQLite write lock, PostgreSQL read-only)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.engine import make_url

import core.store.committer

SHORT_BUSY_TIMEOUT_MS = 200


@asynccontextmanager
async def refuse_writes(db_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """While inside: every write transaction of the service fails; afterwards writes work again.

    SQLite: another connection holds the write lock (the service's writer gives up after its
    busy timeout, shortened here so a test does not wait 10 s per attempt). PostgreSQL: the
    database's sessions default to read-only and the service's connections are dropped, so it
    reconnects into read-only transactions; on leaving, the default is reset and they are
    dropped again.
    """
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        monkeypatch.setattr(core.store.committer, "SQLITE_BUSY_TIMEOUT_MS", SHORT_BUSY_TIMEOUT_MS)
        holder = sqlite3.connect(url.database or "", isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            yield
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        return
    name = url.database
    admin = await asyncpg.connect(
        user=url.username, host=url.host, port=url.port, database="postgres", password=url.password
    )
    try:
        await admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        await _drop_connections(admin, name)
        try:
            yield
        finally:
            await admin.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
            await _drop_connections(admin, name)
    finally:
        await admin.close()


async def _drop_connections(admin: asyncpg.Connection, name: str | None) -> None:
    await admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", name
    )
