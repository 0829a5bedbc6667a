"""Migrations create turnstile's tables only in an empty database or turnstile's own, unless told otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from core.store.db import create_db_engine
from core.store.migrate import ForeignDatabase, migrate, migrate_database

ROOT = Path(__file__).resolve().parents[2]


async def _tables(url: str) -> set[str]:
    engine = create_db_engine(url)
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
    finally:
        await engine.dispose()


async def _create_foreign_table(url: str) -> None:
    engine = create_db_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE invoices (id INTEGER PRIMARY KEY)"))
    finally:
        await engine.dispose()


async def test_a_database_with_other_tables_is_refused_unless_allowed(db_url: str) -> None:
    await _create_foreign_table(db_url)
    with pytest.raises(ForeignDatabase, match="invoices") as refused:
        await migrate_database(db_url)
    assert refused.value.code == "conflict"
    assert await _tables(db_url) == {"invoices"}, "nothing of turnstile's was created"
    assert await migrate_database(db_url, allow_foreign_tables=True)
    assert "alembic_version" in await _tables(db_url)
    assert await migrate_database(db_url)  # turnstile's now: later starts migrate without the flag


async def test_an_empty_database_is_migrated_and_reports_its_revision(db_url: str) -> None:
    engine = create_db_engine(db_url)
    try:
        revision = await migrate(engine)
        assert revision and revision == await migrate(engine)
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_postgres_admin_database_is_refused(postgres_url: str) -> None:
    admin = postgres_url.rsplit("/", 1)[0] + "/postgres"
    with pytest.raises(ForeignDatabase, match="admin database"):
        await migrate_database(admin)


def test_turnstile_migrate_command(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_")} | {"TURNSTILE_DATABASE_URL": url}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "consumers.cli", "migrate", *args], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=60,
        )

    first = run()
    assert first.returncode == 0, first.stderr
    assert "database at revision" in first.stdout
    foreign = f"sqlite+aiosqlite:///{tmp_path / 'other.db'}"
    import asyncio

    asyncio.run(_create_foreign_table(foreign))
    env["TURNSTILE_DATABASE_URL"] = foreign
    refused = run()
    assert refused.returncode == 2 and "not turnstile's" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert run("--allow-foreign-tables").returncode == 0


async def test_a_migration_in_a_child_process_refuses_a_foreign_database_alike(db_url: str) -> None:
    await _create_foreign_table(db_url)
    engine = create_db_engine(db_url)
    try:
        with pytest.raises(ForeignDatabase, match="invoices"):
            await migrate(engine, in_child=True)
        assert await migrate(engine, allow_foreign_tables=True, in_child=True)
    finally:
        await engine.dispose()
    assert "alembic_version" in await _tables(db_url)
