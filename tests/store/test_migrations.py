"""Alembic migrations build exactly the schema the code declares, on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

import core.store.tables  # noqa: F401
from core.store.db import create_db_engine, metadata
from core.store.migrate import SCHEMA_HEAD, migrate


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


def test_the_schema_head_constant_is_alembics_head() -> None:
    # A start-up against a database at SCHEMA_HEAD skips Alembic: a new migration must move the constant.
    from alembic.script import ScriptDirectory

    from core.store.migrate import SCHEMA_HEAD, alembic_config

    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == SCHEMA_HEAD


async def test_a_migration_in_a_child_process_builds_the_same_schema(db_url: str) -> None:
    engine = create_db_engine(db_url)
    try:
        assert await migrate(engine, in_child=True) == SCHEMA_HEAD
        async with engine.connect() as conn:
            diff = await conn.run_sync(lambda c: compare_metadata(MigrationContext.configure(c), metadata))
        assert diff == []
        assert await migrate(engine, in_child=True) == SCHEMA_HEAD  # at head: nothing to run
    finally:
        await engine.dispose()


def test_the_service_never_imports_alembic_even_on_a_new_database(tmp_path: Path) -> None:
    # What Alembic imports (~10 MB) would stay resident for the life of the service.
    url = f"sqlite+aiosqlite:///{tmp_path / 'new.db'}"
    probe = (
        "import asyncio, sys\n"
        "from core.store.db import create_db_engine\n"
        "from consumers.service import TurnstileService  # noqa: F401  (what `turnstile run` imports)\n"
        "from core.store.migrate import SCHEMA_HEAD, migrate\n"
        "async def main():\n"
        f"    engine = create_db_engine({url!r})\n"
        "    try:\n"
        "        assert await migrate(engine, in_child=True) == SCHEMA_HEAD\n"
        "    finally:\n"
        "        await engine.dispose()\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in ('alembic', 'mako', 'pygments') if m in sys.modules))\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert run.stdout.strip().endswith("[]"), run.stdout + run.stderr


def test_starting_on_a_database_at_head_does_not_import_alembic(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'head.db'}"
    probe = (
        "import asyncio, sys\n"
        "from core.store.db import create_db_engine\n"
        "from consumers.service import TurnstileService  # noqa: F401  (what `turnstile run` imports)\n"
        "from core.store.migrate import SCHEMA_HEAD, migrate\n"
        "async def main():\n"
        f"    engine = create_db_engine({url!r})\n"
        "    try:\n"
        "        assert await migrate(engine) == SCHEMA_HEAD\n"
        "    finally:\n"
        "        await engine.dispose()\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in ('alembic', 'mako', 'pygments') if m in sys.modules))\n"
    )
    first = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert "'alembic'" in first.stdout.splitlines()[-1]  # a new database is migrated by Alembic
    again = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert again.stdout.strip().endswith("[]"), again.stdout + again.stderr
