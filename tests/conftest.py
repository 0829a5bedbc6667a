"""Shared fixtures: database URLs (SQLite file always, PostgreSQL when reachable)."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# The suite drives turns with the scripted provider's directives (/stall, /tool, /fail, …),
# which are off by default in a served process. Set before any Settings() is built, and
# inherited by every `turnstile run` child process a test starts.
os.environ["TURNSTILE_SCRIPTED_DIRECTIVES"] = "true"
# Every service a test starts gets a free port for its HTTP endpoint (many run side by side).
os.environ.setdefault("TURNSTILE_HTTP_PORT", "0")

PG_HOST = os.environ.get("TURNSTILE_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("TURNSTILE_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("TURNSTILE_TEST_PG_USER", "postgres")


def postgres_reachable() -> bool:
    try:
        with socket.create_connection((PG_HOST, PG_PORT), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'turnstile.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    if not postgres_reachable():
        pytest.skip(f"PostgreSQL not reachable on {PG_HOST}:{PG_PORT}")
    import asyncpg

    name = "turnstile_test_" + uuid.uuid4().hex[:12]
    admin = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/postgres"

    async def _exec(sql: str) -> None:
        conn = await asyncpg.connect(admin)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(_exec(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        asyncio.run(_exec(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """Run a test once on a temp SQLite file and once on PostgreSQL (skipped when unreachable)."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("postgres_url"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in item.nodeid.split("::")[0]:
            item.add_marker(pytest.mark.integration)


