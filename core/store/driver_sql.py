"""Hot-path statements compiled once per dialect and run with ``exec_driver_sql``.

A statement run through ``conn.execute(construct, params)`` costs, every time, a cache-key
walk of the construct, the per-parameter bind processing and the building of a result with
its column map. The writes of every message (journal appends, session record upserts, inbox
status marks) are fixed statements over plain values, so they are compiled here once per
dialect into the dialect's own SQL text and parameter style, and run as
``conn.exec_driver_sql(sql, [tuple, ...])``: the caller converts what needs converting (JSON
columns to text) and passes each row's values in the order the compiled statement binds them.
The compiled order is checked against the order the caller builds, so a change of SQLAlchemy's
rendering fails at the first statement instead of writing values into the wrong columns.

``run_rows`` runs such a statement for its rows when no result is read. On the SQLite writer's
synchronous pysqlite connection it goes straight to the DBAPI connection's ``executemany``:
``exec_driver_sql`` still builds an execution context and a result for every statement (~10 µs
of ~15 µs per journal insert or record upsert). The transaction is the caller's as before (the
connection's, begun by the group committer: without one, ``exec_driver_sql`` begins it); a driver error is raised as SQLAlchemy's own
(``IntegrityError``, ``OperationalError``, …) and ``before_cursor_execute`` listeners (the
bench's statement counter) still see each statement.

On PostgreSQL (asyncpg's ``$n`` binds) such a statement can also be a ``Piece``, and
``Joined`` makes several ONE statement, each a data-modifying ``WITH`` part, its binds
renumbered, and at most one ``pg_notify`` after them (``GroupCommitter``: the answer's journal
append with the record upsert queued before it). ``send_pieces`` sends it on the asyncpg connection
itself (the group committer's writes: half the client CPU of ``exec_driver_sql``), ``run_pieces``
through SQLAlchemy.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DatabaseError, DBAPIError, IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

_SQL: dict[tuple[str, str, str, str], str] = {}


def driver_sql(
    conn: Connection | AsyncConnection, name: str, build: Callable[[], ClauseElement], binds: Sequence[str], *,
    column_keys: Sequence[str] | None = None,
) -> str:
    """The SQL text of ``build()`` in ``conn``'s dialect, compiled once per (dialect, ``name``).

    ``binds``: the bind names in the order the caller's tuples hold them (for an INSERT, pass
    the same as ``column_keys``); RuntimeError when the compiled statement binds another order."""
    dialect = conn.dialect
    key = (dialect.name, dialect.driver, dialect.paramstyle, name)
    sql = _SQL.get(key)
    if sql is None:
        keys = list(column_keys) if column_keys is not None else None
        compiled = cast(SQLCompiler, build().compile(dialect=dialect, column_keys=keys))
        order = tuple(compiled.positiontup or ())
        if order != tuple(binds):
            raise RuntimeError(f"{name}: the compiled statement binds {order}, not {tuple(binds)}")
        sql = _SQL[key] = str(compiled)
    return sql


def run_rows(conn: Connection, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Run ``sql`` (from ``driver_sql``) once per row of ``rows``, reading no result."""
    if conn.dialect.driver != "pysqlite" or not conn.in_transaction():  # SQLAlchemy begins it, or PostgreSQL
        conn.exec_driver_sql(sql, list(rows))
        return
    raw = conn.connection.driver_connection
    if conn._has_events or conn.engine._has_events:
        conn.dispatch.before_cursor_execute(conn, None, sql, rows, None, True)
    try:
        raw.executemany(sql, rows)  # type: ignore[union-attr]
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, rows, exc, sqlite3.Error, dialect=conn.dialect) from exc


_BIND = re.compile(r"\$(\d+)")


def renumbered(sql: str, offset: int) -> str:
    """``sql`` (``numeric_dollar``: binds ``$1``…``$n``, no other ``$``) with each bind moved up by ``offset``."""
    return _BIND.sub(lambda m: f"${int(m[1]) + offset}", sql) if offset else sql


@dataclass(frozen=True)
class Piece:
    """A write as ONE data-modifying statement that can join others in one statement (PostgreSQL,
    ``numeric_dollar``): ``sql`` binds ``$1``…``$n`` to ``values``; ``notify`` a ``pg_notify(channel,
    payload)`` sent with it (delivered at commit); ``result`` what the write returns when it lands, or,
    for a statement with ``RETURNING``, ``returned``: what it returns given how many rows it returned."""

    sql: str
    values: tuple[Any, ...]
    notify: tuple[str, str] | None = None
    result: Any = None
    returned: Callable[[int], Any] | None = None


def joins_pieces(db_engine: AsyncEngine | Engine) -> bool:
    """Whether writes on ``db_engine`` can be ``Piece``s joined in one statement (PostgreSQL's asyncpg, ``$n`` binds)."""
    return bool(db_engine.dialect.paramstyle == "numeric_dollar")


# asyncpg binds at most 32767 values in one statement.
MAX_BINDS = 32767


def joinable(pieces: Sequence[Piece]) -> bool:
    """Whether ``run_pieces`` can run ``pieces`` as one statement (at most one notification, bind count)."""
    return sum(p.notify is not None for p in pieces) <= 1 and sum(len(p.values) for p in pieces) + 2 <= MAX_BINDS


@dataclass(frozen=True)
class Joined:
    """``pieces`` as ONE statement, ``WITH w0 AS (…), w1 AS (…) SELECT pg_notify(…)`` (a data-modifying
    ``WITH`` runs whether or not it is read; every part sees the same snapshot, and one failing fails
    the statement: as atomic as a transaction of them). A piece with ``returned`` is counted in the same
    statement (``(SELECT count(*) FROM wN)``)."""

    sql: str
    values: tuple[Any, ...]
    pieces: Sequence[Piece]
    counted: tuple[int, ...]

    @staticmethod
    def of(pieces: Sequence[Piece]) -> Joined:
        parts: list[str] = []
        values: list[Any] = []
        notify: tuple[str, str] | None = None
        for i, piece in enumerate(pieces):
            parts.append(f"w{i} AS ({renumbered(piece.sql, len(values))})")
            values.extend(piece.values)
            notify = piece.notify or notify
        n = len(values)
        counted = tuple(i for i, piece in enumerate(pieces) if piece.returned is not None)
        columns = ["1" if notify is None else f"pg_notify(${n + 1}, ${n + 2})"]
        columns += [f"(SELECT count(*) FROM w{i})" for i in counted]
        return Joined(f"WITH {', '.join(parts)} SELECT {', '.join(columns)}", (*values, *(notify or ())), pieces, counted)

    def results(self, row: Sequence[Any] | None) -> list[Any]:
        """The pieces' results in order, given the statement's one row: a piece with ``returned`` gets ``returned(count)``."""
        counts = dict(zip(self.counted, row[1:] if row is not None else (), strict=True))
        return [p.result if p.returned is None else p.returned(int(counts[i])) for i, p in enumerate(self.pieces)]


def run_pieces(conn: Connection, pieces: Sequence[Piece]) -> list[Any]:
    """Run ``pieces`` as one statement (``Joined``) through SQLAlchemy; their results in order."""
    joined = Joined.of(pieces)
    return joined.results(conn.exec_driver_sql(joined.sql, joined.values).first())


async def send_pieces(conn: AsyncConnection, pieces: Sequence[Piece]) -> list[Any]:
    """Run ``pieces`` as one statement (``Joined``) on ``conn``'s asyncpg connection itself; their results in order.

    ``conn`` must be in autocommit (the statement is its own transaction: durable when this returns).
    Through ``exec_driver_sql`` the same statement costs a greenlet switch, SQLAlchemy's execution context,
    its adapter's prepared-statement cache and a result object: ~290 µs of client CPU a statement against
    ~140 µs sent here (measured 2026-12-06, one-row insert, autocommit, 6 × 2,000 alternated), on the serial
    path of every message. What SQLAlchemy would do around it is kept (``_on_driver``)."""
    joined = Joined.of(pieces)
    row = await _on_driver(conn, joined.sql, joined.values, lambda raw: raw.fetchrow(joined.sql, *joined.values))
    return joined.results(row)


async def fetch_rows(conn: AsyncConnection, sql: str, values: tuple[Any, ...]) -> Sequence[Any]:
    """``sql``'s rows (asyncpg records: read them by position or name) fetched on ``conn``'s asyncpg connection
    itself, past ``exec_driver_sql``'s execution context and result (as ``send_pieces``: the journal reads of
    a reopen)."""
    rows: Sequence[Any] = await _on_driver(conn, sql, values, lambda raw: raw.fetch(sql, *values))
    return rows


async def _on_driver(
    conn: AsyncConnection, sql: str, values: tuple[Any, ...], call: Callable[[Any], Awaitable[Any]],
) -> Any:
    """``call(asyncpg connection)`` for ``sql``, with what SQLAlchemy would do around it: ``before_cursor_execute``
    listeners see the statement; a failure is raised as SQLAlchemy's (``driver_error``: ``IntegrityError`` for a
    constraint, as its asyncpg dialect translates it), so callers read the same errors either way; and a
    connection left in doubt (no answer from the server, or the call interrupted) is invalidated, so its pool
    never hands it out again (SQLAlchemy does that for its own statements; past it, nothing would)."""
    sync = conn.sync_connection
    assert sync is not None
    if sync._has_events or sync.engine._has_events:
        sync.dispatch.before_cursor_execute(sync, None, sql, values, None, False)
    raw = (await conn.get_raw_connection()).driver_connection
    assert raw is not None
    try:
        return await call(raw)
    except BaseException as exc:
        error = driver_error(sql, values, exc) if isinstance(exc, Exception) else None
        if error is None or error.connection_invalidated:
            await conn.invalidate()
        if error is None:
            raise
        raise error from exc


def driver_error(sql: str, values: tuple[Any, ...], exc: Exception) -> DBAPIError:
    """asyncpg's exception as SQLAlchemy's: a constraint as ``IntegrityError``, syntax or access as
    ``ProgrammingError``, anything else the server refused as ``DatabaseError``; a connection-level failure
    (nothing from the server) as ``OperationalError`` with the connection invalidated."""
    import asyncpg  # type: ignore[import-untyped]  # only on PostgreSQL

    if isinstance(exc, asyncpg.IntegrityConstraintViolationError):
        return IntegrityError(sql, values, exc)
    if isinstance(exc, asyncpg.exceptions.SyntaxOrAccessError):
        return ProgrammingError(sql, values, exc)
    if isinstance(exc, asyncpg.PostgresError):
        return DatabaseError(sql, values, exc)
    return OperationalError(sql, values, exc, connection_invalidated=True)
