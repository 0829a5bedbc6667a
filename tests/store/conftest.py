"""Fixtures for the SQL store tests: an engine with the schema created on each database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import core.store.session_tables  # noqa: F401 - registers the session tables on the metadata
from core.store.db import create_db_engine, metadata


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_db_engine(db_url)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    try:
        yield engine
    finally:
        await engine.dispose()
