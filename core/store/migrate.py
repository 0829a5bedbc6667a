"""Schema migrations with Alembic, run programmatically at start-up (``upgrade head``) or by ``turnstile migrate``.

A database that already holds tables but no ``alembic_version`` is not turnstile's (for example
PostgreSQL's ``postgres`` admin database): ``migrate`` refuses to create tables there unless
``allow_foreign_tables`` (``TURNSTILE_DATABASE_ALLOW_FOREIGN_TABLES``, ``turnstile migrate --allow-foreign-tables``).

Alembic (with Mako and Pygments, ~9 MB resident) is imported only when the database is not at
``SCHEMA_HEAD`` already: a start-up against an up-to-date database reads the version row itself.
The service (``migrate(..., in_child=True)``) runs a needed upgrade in a child process
(``python -m core.store.migrate``), so it never imports Alembic at all: what Alembic leaves
behind would otherwise stay resident, and fragment the heap, for the life of the process.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from core.errors import Conflict, TurnstileError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
SOURCE_ROOT = str(Path(__file__).resolve().parents[2])  # where the child process finds ``core``
VERSION_TABLE = "alembic_version"
# The newest revision in ``migrations/versions`` (a unit test holds it equal to Alembic's head).
SCHEMA_HEAD = "b6e1d3f5a7c9"


class ForeignDatabase(Conflict):
    """Raised when the database holds tables that are not turnstile's and migrating there was not allowed."""


class MigrationFailed(TurnstileError):
    """Raised when the child process that migrates the database failed (its last output lines say why)."""


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


ADMIN_DATABASES = frozenset({"postgres", "template0", "template1"})


def foreign_tables(connection: Connection) -> list[str]:
    """The tables of a database turnstile never migrated (empty when it is turnstile's or empty)."""
    tables = inspect(connection).get_table_names()
    return [] if VERSION_TABLE in tables else sorted(tables)


def _refuse_admin_database(connection: Connection) -> None:
    if connection.dialect.name != "postgresql":
        return
    name = connection.exec_driver_sql("SELECT current_database()").scalar()
    if name in ADMIN_DATABASES:
        raise ForeignDatabase(
            f"the database is PostgreSQL's {name!r} admin database; create one for turnstile (CREATE DATABASE "
            f"turnstile) and point TURNSTILE_DATABASE_URL at it, or allow it with "
            f"TURNSTILE_DATABASE_ALLOW_FOREIGN_TABLES=true (turnstile migrate --allow-foreign-tables)"
        )


def _at_head(connection: Connection, allow_foreign_tables: bool) -> bool:
    """True when the database is turnstile's at ``SCHEMA_HEAD`` (nothing to migrate; no Alembic needed)."""
    if not allow_foreign_tables:
        _refuse_admin_database(connection)
    if not inspect(connection).has_table(VERSION_TABLE):
        return False
    versions = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    return versions == [SCHEMA_HEAD]


def _upgrade(connection: Connection, allow_foreign_tables: bool) -> None:
    from alembic import command

    if not allow_foreign_tables:
        _refuse_admin_database(connection)
    found = foreign_tables(connection)
    if found and not allow_foreign_tables:
        shown = ", ".join(found[:5]) + (", …" if len(found) > 5 else "")
        raise ForeignDatabase(
            f"the database is not turnstile's ({len(found)} other tables: {shown}); give turnstile its own database "
            f"(TURNSTILE_DATABASE_URL), or allow it with TURNSTILE_DATABASE_ALLOW_FOREIGN_TABLES=true "
            f"(turnstile migrate --allow-foreign-tables)"
        )
    command.upgrade(alembic_config(connection), "head")


def current_revision(connection: Connection) -> str | None:
    """The database's schema revision (None before the first migration)."""
    from alembic.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


async def migrate(
    db_engine: AsyncEngine, *, allow_foreign_tables: bool = False, in_child: bool = False
) -> str | None:
    """Bring the database schema to the newest revision; returns that revision.

    ``in_child``: a needed upgrade runs in a child process (``python -m core.store.migrate``) on
    the same URL, while this one holds no transaction; the checks before it run here.
    """
    async with db_engine.begin() as conn:
        if await conn.run_sync(_at_head, allow_foreign_tables):
            return SCHEMA_HEAD
        if not in_child:
            await conn.run_sync(_upgrade, allow_foreign_tables)
            return await conn.run_sync(current_revision)
    revision = await migrate_in_child(db_engine.url.render_as_string(hide_password=False), allow_foreign_tables)
    await db_engine.dispose()  # connections opened before the schema changed are not reused
    return revision


async def migrate_in_child(url: str, allow_foreign_tables: bool) -> str | None:
    """``migrate_database`` in a child process; the URL goes through its stdin (never its argv)."""
    paths = (SOURCE_ROOT, os.environ.get("PYTHONPATH"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "core.store.migrate", env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    request = orjson.dumps({"url": url, "allow_foreign_tables": allow_foreign_tables})
    try:
        output, _ = await proc.communicate(request)
    except BaseException:  # cancelled (a stop during start-up): the child does not outlive the wait
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    lines = output.decode(errors="replace").strip().splitlines()
    answer = _answer(lines[-1]) if proc.returncode == 0 and lines else None
    if answer is None:
        raise MigrationFailed(f"migrating the database failed (exit {proc.returncode}): " + " | ".join(lines[-5:]))
    if "refused" in answer:
        raise ForeignDatabase(str(answer["refused"]))
    revision = answer.get("revision")
    return str(revision) if revision is not None else None


def _answer(line: str) -> dict[str, object] | None:
    try:
        answer = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return answer if isinstance(answer, dict) else None


async def migrate_database(url: str, *, allow_foreign_tables: bool = False) -> str | None:
    """``turnstile migrate``: connect to ``url``, migrate it to the newest revision, disconnect."""
    from core.store.db import create_db_engine

    db_engine = create_db_engine(url)
    try:
        return await migrate(db_engine, allow_foreign_tables=allow_foreign_tables)
    finally:
        await db_engine.dispose()


def _child_main() -> None:
    """``python -m core.store.migrate``: reads ``{"url", "allow_foreign_tables"}`` on stdin, migrates, and
    prints ``{"revision": …}`` (or ``{"refused": message}``) as its last line."""
    request = orjson.loads(sys.stdin.buffer.read())
    try:
        revision = asyncio.run(migrate_database(request["url"], allow_foreign_tables=request["allow_foreign_tables"]))
    except ForeignDatabase as exc:
        print(orjson.dumps({"refused": exc.message}).decode(), flush=True)
        return
    print(orjson.dumps({"revision": revision}).decode(), flush=True)


if __name__ == "__main__":
    _child_main()
