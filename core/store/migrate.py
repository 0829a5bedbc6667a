"""Schema migrations with Alembic, run programmatically at start-up (``upgrade head``) or by ``turnstile migrate``.

A database that already holds tables but no ``alembic_version`` is not turnstile's (for example
PostgreSQL's ``postgres`` admin database): ``migrate`` refuses to create tables there unless
``allow_foreign_tables`` (``TURNSTILE_DATABASE_ALLOW_FOREIGN_TABLES``, ``turnstile migrate --allow-foreign-tables``).

Alembic (with Mako and Pygments, ~9 MB resident) is imported only when the database is not at
``SCHEMA_HEAD`` already: a start-up against an up-to-date database reads the version row itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from core.errors import Conflict

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "alembic_version"
# The newest revision in ``migrations/versions`` (a unit test holds it equal to Alembic's head).
SCHEMA_HEAD = "e2b7c9d4f1a8"


class ForeignDatabase(Conflict):
    """Raised when the database holds tables that are not turnstile's and migrating there was not allowed."""


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


async def migrate(db_engine: AsyncEngine, *, allow_foreign_tables: bool = False) -> str | None:
    """Bring the database schema to the newest revision; returns that revision."""
    async with db_engine.begin() as conn:
        if await conn.run_sync(_at_head, allow_foreign_tables):
            return SCHEMA_HEAD
        await conn.run_sync(_upgrade, allow_foreign_tables)
        return await conn.run_sync(current_revision)


async def migrate_database(url: str, *, allow_foreign_tables: bool = False) -> str | None:
    """``turnstile migrate``: connect to ``url``, migrate it to the newest revision, disconnect."""
    from core.store.db import create_db_engine

    db_engine = create_db_engine(url)
    try:
        return await migrate(db_engine, allow_foreign_tables=allow_foreign_tables)
    finally:
        await db_engine.dispose()
