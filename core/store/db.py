"""Engine creation and the one shared SQL metadata.

Every table module registers its tables on ``metadata`` so Alembic and tests
see one schema. SQLite gets WAL, a busy timeout and ``BEGIN IMMEDIATE`` for
every transaction (a deferred transaction that reads then writes fails with
SQLITE_BUSY at once, ignoring busy_timeout: aiosqlite #251).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import Engine, MetaData, Table, event
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

if TYPE_CHECKING:
    from sqlalchemy.dialects.postgresql import Insert as PostgresInsert
    from sqlalchemy.dialects.sqlite import Insert as SqliteInsert

SQLITE_BUSY_TIMEOUT_MS = 10_000
# PRAGMA synchronous in WAL mode: NORMAL survives a killed process (the OS still writes the WAL);
# FULL also survives an OS crash or power loss (an fsync per commit), like JetStream's
# ``sync_interval: always``. Chosen by TURNSTILE_SQLITE_SYNCHRONOUS.
SQLITE_SYNCHRONOUS = ("NORMAL", "FULL")


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def normalise_url(url: str) -> str:
    """Map plain driver URLs onto their async drivers (``sqlite://`` → aiosqlite, ``postgresql://`` → asyncpg)."""
    if url.startswith("sqlite:"):
        return "sqlite+aiosqlite:" + url[len("sqlite:"):]
    if url.startswith("postgresql:") or url.startswith("postgres:"):
        return "postgresql+asyncpg:" + url.split(":", 1)[1]
    return url


def json_text(value: Any) -> str:
    """JSON columns' serializer: orjson (compact; 4–20× quicker than ``json.dumps`` on the small
    values of a session row's JSON columns); what orjson refuses (an integer past 64 bits) goes to ``json``."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value)


def create_db_engine(url: str, *, sqlite_synchronous: str = "NORMAL", **kwargs: Any) -> AsyncEngine:
    """Create the async engine; for SQLite set WAL, busy timeout, ``synchronous`` and immediate transactions."""
    url = normalise_url(url)
    kwargs.setdefault("json_serializer", json_text)
    if is_sqlite(url):
        # The hot writes go through the GroupCommitter's own writer connection; this pool
        # serves reads (WAL: they never wait for the writer) and the rare other writes.
        kwargs.setdefault("pool_size", 4)
        kwargs.setdefault("max_overflow", 0)
        kwargs.setdefault("pool_timeout", 60)
        db_engine = create_async_engine(url, **kwargs)
        _configure_sqlite(db_engine.sync_engine, sqlite_synchronous)
        return db_engine
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 10)
    return create_async_engine(url, **kwargs)


@cache
def upsert_insert(dialect_name: str) -> Callable[[Table], PostgresInsert | SqliteInsert]:
    """The dialect's ``insert`` (with its ``ON CONFLICT`` clauses) for a connection's ``dialect.name``.

    PostgreSQL's dialect package (~2 MB resident) is imported only by a process that uses it.
    """
    if dialect_name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgres_insert

        return postgres_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert


def _configure_sqlite(db_engine: Engine, synchronous: str, *, immediate_begin: bool = True) -> None:
    if synchronous not in SQLITE_SYNCHRONOUS:
        raise ValueError(f"SQLite synchronous must be one of {', '.join(SQLITE_SYNCHRONOUS)}, not {synchronous!r}")

    @event.listens_for(db_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, emit BEGIN so we can make it IMMEDIATE.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    if not immediate_begin:  # the caller emits BEGIN IMMEDIATE on the DBAPI connection itself
        return

    @event.listens_for(db_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def create_sqlite_reader_engine(async_engine: AsyncEngine) -> Engine:
    """A synchronous database engine with one read-only connection on the same SQLite file, for short
    reads run on the event loop itself (a WAL reader never waits for the writer; ``busy_timeout=0``:
    in the rare case it would wait, the caller reads through the async pool instead)."""
    url = async_engine.url.set(drivername="sqlite")
    db_engine = create_sync_engine_(url, pool_size=1, max_overflow=0)
    _configure_sqlite(db_engine, "NORMAL", immediate_begin=False)
    _on_connect_pragmas(db_engine, "busy_timeout=0", "query_only=1")
    return db_engine


def create_sqlite_writer_engine(async_engine: AsyncEngine, synchronous: str = "NORMAL") -> Engine:
    """A synchronous database engine with one connection on the same SQLite file: the group committer's.

    Its connection does not wait for the write lock (``busy_timeout=0``: the committer runs
    a transaction on the event loop only when the lock is free, else in a thread that may
    wait) and does not checkpoint the WAL on commit (``wal_autocheckpoint=0``: the committer
    checkpoints in the background, so a commit never stalls on an fsync of the database).
    Its user emits ``BEGIN IMMEDIATE`` on the DBAPI connection (no ``begin`` listener: a statement
    through SQLAlchemy per transaction cost ~20 % of a one-insert group transaction).
    """
    url = async_engine.url.set(drivername="sqlite")
    # Used from the loop's thread and (when it must wait for the lock) the committer's thread,
    # one transaction at a time: the committer serialises them.
    db_engine = create_sync_engine_(
        url, pool_size=1, max_overflow=0, connect_args={"check_same_thread": False}, json_serializer=json_text
    )
    _configure_sqlite(db_engine, synchronous, immediate_begin=False)
    _on_connect_pragmas(db_engine, "busy_timeout=0", "wal_autocheckpoint=0")
    return db_engine


def _on_connect_pragmas(db_engine: Engine, *pragmas: str) -> None:
    """Set ``pragmas`` (after ``_configure_sqlite``'s) on every new connection of ``db_engine``."""

    @event.listens_for(db_engine, "connect")
    def _set(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        for pragma in pragmas:
            cur.execute(f"PRAGMA {pragma}")
        cur.close()
