"""Engine-store fixtures: an engine with the journal and knowledge tables created."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import core.store.journal_tables  # noqa: F401 - registers the tables on metadata
from core.store.db import create_db_engine, metadata


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_db_engine(db_url)
    async with eng.begin() as conn:
        await conn.run_sync(metadata.create_all)
    yield eng
    await eng.dispose()
