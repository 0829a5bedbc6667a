"""Alembic migrations build exactly the schema the code declares, on SQLite and PostgreSQL."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

import core.store.tables  # noqa: F401
from core.store.db import create_db_engine, metadata
from core.store.migrate import migrate


async def test_upgrade_head_matches_the_declared_tables(db_url: str) -> None:
    engine = create_db_engine(db_url)
    try:
        await migrate(engine)
        await migrate(engine)  # idempotent: a second start changes nothing

        async with engine.connect() as conn:
            diff = await conn.run_sync(lambda c: compare_metadata(MigrationContext.configure(c), metadata))
            tables = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
        assert diff == [], f"schema drift: generate a migration ({diff})"
        assert set(metadata.tables) <= tables
    finally:
        await engine.dispose()
