"""A SQLite service never loads PostgreSQL's SQLAlchemy dialect (~2 MB resident for the life of the process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy.dialects import postgresql, sqlite

from core.store.db import upsert_insert


def test_a_sqlite_service_never_imports_the_postgresql_dialect(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'new.db'}"
    probe = (
        "import asyncio, sys\n"
        "from consumers.service import TurnstileService  # noqa: F401  (what `turnstile run` imports)\n"
        "from core.store.db import create_db_engine, upsert_insert\n"
        "from core.store.migrate import migrate\n"
        "from core.store.lease_repo import file_leases\n"
        "async def main():\n"
        f"    engine = create_db_engine({url!r})\n"
        "    try:\n"
        "        await migrate(engine, in_child=True)\n"
        "        async with engine.begin() as conn:\n"
        "            await conn.execute(upsert_insert(conn.dialect.name)(file_leases).values(\n"
        "                path='probe', holder='me', acquired_at=0.0).on_conflict_do_nothing())\n"
        "    finally:\n"
        "        await engine.dispose()\n"
        "asyncio.run(main())\n"
        "print('sqlalchemy.dialects.postgresql' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert run.stdout.strip().endswith("False"), run.stdout + run.stderr


def test_each_dialect_gets_its_own_insert() -> None:
    assert upsert_insert("postgresql") is postgresql.insert
    assert upsert_insert("sqlite") is sqlite.insert
