"""The soak's database: a SQLite file in the work directory, or a fresh PostgreSQL database dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.conftest import PG_HOST, PG_PORT, PG_USER, postgres_reachable


@asynccontextmanager
async def soak_database(kind: str, workdir: Path) -> AsyncIterator[str]:
    """Yield a SQLAlchemy URL for ``kind`` (``sqlite`` or ``postgres``)."""
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{workdir / 'turnstile.db'}"
        return
    if kind != "postgres":
        raise ValueError(f"TURNSTILE_SOAK_DATABASE must be sqlite or postgres, not {kind!r}")
    if not postgres_reachable():
        raise RuntimeError(f"PostgreSQL not reachable on {PG_HOST}:{PG_PORT}")
    import asyncpg

    name = "turnstile_soak_" + uuid.uuid4().hex[:12]
    admin = await asyncpg.connect(f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/postgres")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        admin = await asyncpg.connect(f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/postgres")
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
