"""SQL file leases (KS-19): a managed-source session's write leases outlive the process.

One row per leased path. ``acquire`` inserts the row or finds it held by the same
holder (one statement, ON CONFLICT DO NOTHING, then a read of the holder in the same
transaction), so two processes sharing PostgreSQL never both hold a path.
"""

from __future__ import annotations

import time

from sqlalchemy import Column, Float, String, Table, delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from core.errors import Conflict
from core.store.db import metadata, upsert_insert

file_leases = Table(
    "file_leases",
    metadata,
    Column("path", String(2048), primary_key=True),
    Column("holder", String(512), nullable=False, index=True),
    Column("acquired_at", Float, nullable=False),
)


class SqlFileLeases:
    """``FileLeases`` on SQLAlchemy async (SQLite or PostgreSQL)."""

    def __init__(self, db_engine: AsyncEngine) -> None:
        self._db_engine = db_engine

    async def acquire(self, holder: str, path: str) -> None:
        """Lease ``path`` for ``holder`` (again is fine); Conflict when another holder has it."""
        async with self._db_engine.begin() as conn:
            insert = upsert_insert(conn.dialect.name)(file_leases)
            await conn.execute(
                insert.values(path=path, holder=holder, acquired_at=time.time()).on_conflict_do_nothing()
            )
            current = (await conn.execute(select(file_leases.c.holder).where(file_leases.c.path == path))).scalar()
        if current != holder:
            raise Conflict(f"{path} is leased by another session")

    async def held_by(self, holder: str) -> list[str]:
        """Paths ``holder`` leases, sorted."""
        query = select(file_leases.c.path).where(file_leases.c.holder == holder).order_by(file_leases.c.path)
        async with self._db_engine.connect() as conn:
            return [str(p) for p in (await conn.execute(query)).scalars()]

    async def release_all(self, holder: str) -> int:
        """Release every lease of ``holder``; the number released."""
        async with self._db_engine.begin() as conn:
            result = await conn.execute(delete(file_leases).where(file_leases.c.holder == holder))
        return int(result.rowcount or 0)
