"""SqlPlatformRepository: adapter instances registered over the control API, persisted (shared by processes).

Instances configured at start (``TURNSTILE_PLATFORMS_JSON``) are not stored here; ``platform.register``
writes a row (a later one with the same ``instance_id`` replaces it) and ``platform.unregister`` deletes
it, so a restart, and every other process on the same database, knows the same registrations. On
PostgreSQL each write also notifies the other processes (``core.store.change_feed``).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import JSON, Column, Connection, Double, String, Table, delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from core.sessions.platforms import AdapterInstance
from core.store.db import metadata, upsert_insert

ID_LEN = 512

platform_instances_table = Table(
    "platform_instances",
    metadata,
    Column("instance_id", String(ID_LEN), primary_key=True),
    Column("platform", String(128), nullable=False),
    Column("type", String(128), nullable=False),
    Column("claims_json", JSON, nullable=False),
    Column("chat_scopes_json", JSON, nullable=False),
    Column("registered_at", Double, nullable=False),
)


def instance_row(instance: AdapterInstance) -> dict[str, Any]:
    """The row of one adapter instance."""
    return {
        "instance_id": instance.instance_id,
        "platform": instance.platform,
        "type": instance.type,
        "claims_json": list(instance.claims),
        "chat_scopes_json": dict(instance.chat_scopes),
        "registered_at": time.time(),
    }


def instance_from_row(row: Any) -> AdapterInstance:
    """An adapter instance from its row (malformed JSON reads as no claims, no scopes)."""
    claims = row["claims_json"] if isinstance(row["claims_json"], list) else []
    scopes = row["chat_scopes_json"] if isinstance(row["chat_scopes_json"], dict) else {}
    return AdapterInstance(
        instance_id=row["instance_id"], platform=row["platform"], type=row["type"],
        claims=tuple(str(c) for c in claims), chat_scopes={str(k): bool(v) for k, v in scopes.items()},
    )


class SqlPlatformRepository:
    """Registered adapter instances on SQLAlchemy async (SQLite or PostgreSQL).

    ``on_write`` (optional) runs inside each write's transaction, e.g. to notify other processes.
    """

    def __init__(self, engine: AsyncEngine, on_write: Any = None) -> None:
        self._engine = engine
        self._on_write = on_write

    async def load(self) -> list[AdapterInstance]:
        """Every registered instance, in registration order."""
        async with self._engine.connect() as conn:
            rows = (await conn.execute(
                select(platform_instances_table).order_by(
                    platform_instances_table.c.registered_at, platform_instances_table.c.instance_id
                )
            )).mappings().all()
        return [instance_from_row(r) for r in rows]

    async def put(self, instance: AdapterInstance) -> None:
        """Store ``instance``, replacing the one with the same id."""
        async with self._engine.begin() as conn:
            await conn.run_sync(self._put, instance)

    def _put(self, conn: Connection, instance: AdapterInstance) -> None:
        dialect_insert = upsert_insert(conn.dialect.name)
        stmt = dialect_insert(platform_instances_table).values(**instance_row(instance))
        keep = {"instance_id", "registered_at"}  # a replacement keeps its place in the order
        stmt = stmt.on_conflict_do_update(
            index_elements=["instance_id"],
            set_={c.name: stmt.excluded[c.name] for c in platform_instances_table.columns if c.name not in keep},
        )
        conn.execute(stmt)
        if self._on_write is not None:
            self._on_write(conn)

    async def delete(self, instance_id: str) -> bool:
        """Remove a stored instance; True when it was stored."""
        async with self._engine.begin() as conn:
            return bool(await conn.run_sync(self._delete, instance_id))

    def _delete(self, conn: Connection, instance_id: str) -> bool:
        result = conn.execute(
            delete(platform_instances_table).where(platform_instances_table.c.instance_id == instance_id)
        )
        if self._on_write is not None:
            self._on_write(conn)
        return bool(result.rowcount)
