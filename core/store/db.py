"""Engine creation and the one shared SQL metadata.

Every table module registers its tables on ``metadata`` so Alembic and tests
see one schema. SQLite gets WAL, a busy timeout and ``BEGIN IMMEDIATE`` for
every transaction (a deferred transaction that reads then writes fails with
SQLITE_BUSY at once, ignoring busy_timeout: aiosqlite #251).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, MetaData, event
from sqlalchemy import create_engine as create_sync_engine_
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

SQLITE_BUSY_TIMEOUT_MS = 10_000


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def normalise_url(url: str) -> str:
    """Map plain driver URLs onto their async drivers (``sqlite://`` → aiosqlite, ``postgresql://`` → asyncpg)."""
    if url.startswith("sqlite:"):
        return "sqlite+aiosqlite:" + url[len("sqlite:"):]
    if url.startswith("postgresql:") or url.startswith("postgres:"):
        return "postgresql+asyncpg:" + url.split(":", 1)[1]
    return url


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """Create the async engine; for SQLite set WAL, busy timeout and immediate transactions."""
    url = normalise_url(url)
    if is_sqlite(url):
        # The hot writes go through the GroupCommitter's own writer connection; this pool
        # serves reads (WAL: they never wait for the writer) and the rare other writes.
        kwargs.setdefault("pool_size", 4)
        kwargs.setdefault("max_overflow", 0)
        kwargs.setdefault("pool_timeout", 60)
        engine = create_async_engine(url, **kwargs)
        _configure_sqlite(engine.sync_engine)
        return engine
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 10)
    return create_async_engine(url, **kwargs)


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, emit BEGIN so we can make it IMMEDIATE.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def create_sqlite_writer_engine(async_engine: AsyncEngine) -> Engine:
    """A synchronous engine on the same SQLite file, for a dedicated writer thread.

    Through aiosqlite every statement is a thread hand-off (~0.3 ms each, measured);
    a whole group transaction in one thread costs one hand-off.
    """
    url = async_engine.url.set(drivername="sqlite")
    engine = create_sync_engine_(url, pool_size=1, max_overflow=0)
    _configure_sqlite(engine)
    return engine
