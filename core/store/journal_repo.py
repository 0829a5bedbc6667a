"""SQL history journal with group commit.

``append`` hands its rows to a ``GroupCommitter`` (the process-wide one when
given, else its own): one writer takes everything queued, writes it in ONE
transaction and resolves every caller after the commit, so under load many
sessions share each transaction without any fixed delay. A failing batch is
retried one append at a time, so a single bad append (e.g. a taken seq →
``Conflict``) cannot fail the others. Entries are durable when ``append`` returns.

Rows are keyed by (session id, generation, seq): a write of generation g that lands
after a deletion's clear is never read by generation g+1 (SM-21/SM-22), and
``clear_stale`` removes such rows, and those of ids without a record, at start-up.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, Select, and_, bindparam, delete, exists, func, insert, or_, select, tuple_
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from core.engine.journal import EntryKind, JournalEntry
from core.errors import Conflict, OwnershipLost, Unavailable
from core.store.committer import GroupCommitter
from core.store.db import create_sqlite_reader_engine, is_sqlite
from core.store.driver_sql import Piece, driver_sql, fetch_rows, joins_pieces, renumbered, run_rows
from core.store.journal_tables import journal_entries
from core.store.partition_epochs import WriteFence, claims_of, epochs_hold
from core.store.session_tables import generations_table, sessions_table

# Rows a reopen reads ahead (``newest``): a plain turn journals 3 (the user message; the answer and
# the turn's end), and the tail past a checkpoint is usually empty.
READ_AHEAD_ROWS = 4
# SQLite: a session's event ids (KS-14: read once per loaded session, when it has more events than its
# state remembers and a second one to look up) are read on the event loop when it has fewer than this
# many, like a tail; a read that comes back full goes through the async pool (a session that long would
# hold the loop).
EVENT_IDS_ON_LOOP = 2048

class SqlHistoryJournal:
    """``HistoryJournal`` on SQLAlchemy async (SQLite or PostgreSQL). Call ``aclose`` at shutdown."""

    def __init__(self, db_engine: AsyncEngine, *, committer: GroupCommitter | None = None) -> None:
        self._db_engine = db_engine
        self._own_committer = committer is None
        self._committer = committer if committer is not None else GroupCommitter(db_engine)
        self.appends = 0
        # Partitioned: appends carry the partition epoch held (core/store/partition_epochs.py).
        self.fence: WriteFence | None = None
        # SQLite: a restore's journal tail (the rows past its checkpoint: usually none) is read on
        # the event loop through this one read-only connection, ~0.1 ms, instead of the async pool's
        # four thread hops (checkout, execute, fetch, reset: ~2.5 ms of a cold open on a loaded machine).
        self._tail_reader: Engine | None = (
            create_sqlite_reader_engine(db_engine) if is_sqlite(db_engine.url.drivername) else None
        )
        # PostgreSQL: a read is one SELECT, run in autocommit: one round trip, where a pooled connection's
        # implicit transaction added a BEGIN before it and a ROLLBACK when it went back to the pool.
        self._reads: AsyncEngine = (
            db_engine if self._tail_reader is not None else db_engine.execution_options(isolation_level="AUTOCOMMIT")
        )
        # PostgreSQL (asyncpg): an unfenced append can join other writes in one statement (``Piece``).
        self._joins = joins_pieces(db_engine)

    @property
    def transactions(self) -> int:
        """Transactions the committer has run (shared with other writers when it is the process's)."""
        return self._committer.transactions

    async def append(self, session_id: str, entries: list[JournalEntry], *, generation: int = 0) -> None:
        """Durably append to ``generation``'s history (group-committed); Conflict when a seq is taken,
        ``OwnershipLost`` (nothing written) when the session's partition has a newer owner."""
        if not entries:
            return
        rows = [
            (session_id, generation, e.seq, e.kind.value, e.turn_id, e.external_event_id, e.at,
             orjson.dumps(e.payload).decode())
            for e in entries
        ]
        claims = claims_of(self.fence, [session_id])

        def op(conn: Connection) -> bool:
            if not epochs_hold(conn, claims):
                return False  # an answer, not an error: the group transaction goes on
            run_rows(conn, _insert_sql(conn), rows)
            return True

        piece = None
        if not claims and self._joins:
            values = tuple(v for row in rows for v in row)
            piece = lambda conn: Piece(_rows_sql(conn, len(rows)), values, result=True)  # noqa: E731
        try:
            written = await self._committer.run(op, one_statement=not claims, piece=piece)
        except Exception as exc:
            error = _translate(session_id, entries, exc)
            if error is exc:
                raise
            raise error from exc
        if not written:
            raise OwnershipLost(f"journal of {session_id!r} not written: its partition has a newer owner")
        self.appends += 1

    async def load(self, session_id: str, *, generation: int = 0, from_seq: int = 0) -> list[JournalEntry]:
        """Every entry of the session's ``generation`` with ``seq >= from_seq`` in seq order (a range of the
        primary key: a reopen from a checkpoint reads only the rows it does not cover)."""
        if from_seq:
            values: tuple[Any, ...] = (session_id, generation, from_seq)
            rows = self._read_on_loop(_TAIL, values)
            if rows is None:
                rows = await self._pool_read(_TAIL, values)
        else:
            rows = await self._pool_read(_ALL, (session_id, generation))
        return _as_entries(rows)

    @property
    def reads_ahead(self) -> bool:
        """Whether a reopen should read the newest entries while it fetches the checkpoint (PostgreSQL:
        the read is a round trip to the server that can overlap the fetch; SQLite reads the tail on
        the event loop in ~0.1 ms, which overlaps nothing)."""
        return self._tail_reader is None

    async def newest(self, session_id: str, *, generation: int = 0, count: int = READ_AHEAD_ROWS) -> NewestEntries:
        """The newest ``count`` rows of the session's ``generation`` (one backward range of the primary key),
        for a reopen that does not know yet from which seq it needs them."""
        rows = await self._pool_read(_NEWEST, (session_id, generation, count, 0))
        return NewestEntries(rows[::-1], complete=len(rows) < count)

    async def entries_for_event(
        self, session_id: str, external_event_id: str, kinds: Sequence[EntryKind], *, generation: int = 0
    ) -> list[JournalEntry]:
        """``generation``'s entries of ``kinds`` tied to the event in seq order (index ``ix_journal_entries_event``:
        one event's rows, whatever the session's length; on SQLite read on the loop, like a tail)."""
        read = _event_read(len(kinds))
        values = (session_id, generation, external_event_id, *(k.value for k in kinds))
        rows = self._read_on_loop(read, values)
        if rows is None:
            rows = await self._pool_read(read, values)
        return _as_entries(rows)

    def _read_on_loop(self, read: _Read, values: tuple[Any, ...]) -> Sequence[Any] | None:
        """SQLite: ``read``'s rows read on the event loop through the read-only connection, the index it names
        used; None on PostgreSQL, or when that read fails (busy: the reader never waits on the loop; or no
        such index), for the pool to read the same rows."""
        if self._tail_reader is None:
            return None
        try:
            with self._tail_reader.connect() as conn:
                sql = driver_sql(conn, read.name, read.build, read.binds)
                if read.sqlite_index is not None:
                    sql = _indexed_by(sql, read.sqlite_index)
                return conn.exec_driver_sql(sql, values).all()
        except DBAPIError:
            return None

    async def _pool_read(self, read: _Read, values: tuple[Any, ...]) -> Sequence[Any]:
        """``read``'s rows (read by position) through the async pool; Unavailable when the read fails.
        PostgreSQL: fetched on the pooled connection's asyncpg connection itself (``fetch_rows``)."""
        try:
            async with self._reads.connect() as conn:
                sql = driver_sql(conn, read.name, read.build, read.binds)
                if self._joins:
                    return await fetch_rows(conn, sql, values)
                return (await conn.exec_driver_sql(sql, values)).all()
        except DBAPIError as exc:
            raise Unavailable(f"journal read failed: {exc.orig!r}") from exc

    async def event_ids(self, session_id: str, *, generation: int = 0) -> set[str]:
        """Every external event id the session's stored entries are tied to (read once per loaded session).

        A superset of ``generation``'s (the port allows it): the ids of older generations not cleared
        yet are included, and entries of every kind count, so the read is the event index alone
        (``ix_journal_entries_event``: session id, event id), never the rows and their payloads.
        SQLite: on the loop through the read-only connection (~0.1 ms, where the async pool's thread
        hops took ~2 ms of a message after a reopen), unless the session has ``EVENT_IDS_ON_LOOP``
        or more events."""
        bound = EVENT_IDS_ON_LOOP
        near = self._read_on_loop(_EVENT_IDS_NEAR, (session_id, bound, 0))
        if near is not None and len(near) < bound:
            return {str(row[0]) for row in near}
        rows = await self._pool_read(_EVENT_IDS, (session_id,))
        return {str(row[0]) for row in rows}

    async def clear(self, session_id: str, *, before_generation: int | None = None) -> None:
        """Delete the session's history: of generations older than ``before_generation``, or all."""
        where = journal_entries.c.session_id == session_id
        if before_generation is not None:
            where = and_(where, journal_entries.c.generation < before_generation)
        await self._committer.run(lambda conn: conn.execute(delete(journal_entries).where(where)))

    async def clear_older(self, generations: Sequence[tuple[str, int]]) -> None:
        """Per ``(session_id, generation)``: delete that session's older generations, all in one transaction."""
        if not generations:
            return
        j = journal_entries
        older = delete(j).where(j.c.session_id == bindparam("sid"), j.c.generation < bindparam("gen"))
        params = [{"sid": sid, "gen": gen} for sid, gen in generations]
        await self._committer.run(lambda conn: conn.execute(older, params))

    async def clear_stale(self) -> int:
        """Delete rows no session can read (start-up): of ids without a record, or of a
        generation older than the id's persisted one (a crash between a deletion's record
        removal and its clear, or a write that landed after the clear). Returns the count."""
        j, s, g = journal_entries, sessions_table, generations_table
        # Judged once per (id, generation), not per row: the pairs come off the primary key's prefix.
        pairs = select(j.c.session_id, j.c.generation).distinct().subquery()
        current = func.coalesce(select(g.c.generation).where(g.c.session_id == pairs.c.session_id).scalar_subquery(), 0)
        stale = select(pairs.c.session_id, pairs.c.generation).where(
            or_(~exists().where(s.c.id == pairs.c.session_id), pairs.c.generation < current)
        )
        result = await self._committer.run(
            lambda conn: conn.execute(delete(j).where(tuple_(j.c.session_id, j.c.generation).in_(stale)))
        )
        return int(result.rowcount or 0)

    async def aclose(self) -> None:
        """Flush queued appends (and stop the committer when it is this journal's own)."""
        if self._own_committer:
            await self._committer.aclose()
        if self._tail_reader is not None:
            self._tail_reader.dispose()


class NewestEntries:
    """The newest rows of one generation (``JournalReadAhead``): they answer a range that starts at or
    after the oldest of them, or any range when they are every row of the generation."""

    def __init__(self, rows: Sequence[Any], *, complete: bool) -> None:
        self._rows = rows  # in seq order
        self._complete = complete

    def entries_from(self, from_seq: int) -> list[JournalEntry] | None:
        if not self._complete and (not self._rows or self._rows[0][_SEQ] > from_seq):
            return None
        return _as_entries([row for row in self._rows if row[_SEQ] >= from_seq])


@dataclass(frozen=True)
class _Read:
    """A journal read: its statement, compiled once per dialect and run as SQL text with its values in
    ``binds`` order (``driver_sql``). Built, cache-keyed and bound through SQLAlchemy on every read, the
    same statements cost ~0.3 ms of a ~0.4 ms SQLite read on the loop and ~0.22 ms of CPU of a ~0.55 ms
    PostgreSQL read. ``sqlite_index``: the index SQLite must read it through (``INDEXED BY``), where its
    planner would take another."""

    name: str
    build: Callable[[], Select[Any]]
    binds: tuple[str, ...]
    sqlite_index: str | None = None


_J = journal_entries
_OF_SESSION = (_J.c.session_id == bindparam("sid"), _J.c.generation == bindparam("gen"))
_ALL = _Read("journal all", lambda: select(_J).where(*_OF_SESSION).order_by(_J.c.seq), ("sid", "gen"))
_TAIL = _Read(
    "journal tail", lambda: select(_J).where(*_OF_SESSION, _J.c.seq >= bindparam("from")).order_by(_J.c.seq),
    ("sid", "gen", "from"),
)
# LIMIT with its OFFSET bound: SQLite's compiler binds one anyway.
_NEWEST = _Read(
    "journal newest",
    lambda: select(_J).where(*_OF_SESSION).order_by(_J.c.seq.desc()).limit(bindparam("n")).offset(bindparam("skip")),
    ("sid", "gen", "n", "skip"),
)
_EVENT_IDS = _Read(
    "journal event ids",
    lambda: select(_J.c.external_event_id).where(_J.c.session_id == bindparam("sid"), _J.c.external_event_id.is_not(None)).distinct(),
    ("sid",),
)
_EVENT_IDS_NEAR = _Read(
    "journal event ids near", lambda: _EVENT_IDS.build().limit(bindparam("n")).offset(bindparam("skip")), ("sid", "n", "skip"),
)


@functools.cache
def _indexed_by(sql: str, index: str) -> str:
    """``sql`` reading ``journal_entries`` through ``index`` (SQLite's ``INDEXED BY``; SQLAlchemy renders no
    table hints for SQLite), made once per statement text."""
    return sql.replace("FROM journal_entries", f"FROM journal_entries INDEXED BY {index}", 1)


@functools.cache
def _event_read(kinds: int) -> _Read:
    """One event's entries of ``kinds`` kinds. SQLite's planner takes the primary key for it, which also gives
    the seq order, and filters every row of the session (0.8 ms a lookup at 3,000 entries, on the loop): it is
    told to read the event index, which holds that event's few rows."""
    return _Read(
        f"journal event {kinds}",
        lambda: select(_J).where(
            *_OF_SESSION, _J.c.external_event_id == bindparam("event"),
            _J.c.kind.in_([bindparam(f"k{i}") for i in range(kinds)]),
        ).order_by(_J.c.seq),
        ("sid", "gen", "event", *(f"k{i}" for i in range(kinds))),
        sqlite_index="ix_journal_entries_event",
    )


# The columns of an appended row, in the order of the tuples ``append`` builds, and of a row read (``select`` of
# the table: its column order, checked here); rows are read by position (``_as_entries``).
_ROW_COLUMNS = ("session_id", "generation", "seq", "kind", "turn_id", "external_event_id", "at", "payload")
_SEQ = _ROW_COLUMNS.index("seq")
if tuple(c.name for c in journal_entries.columns) != _ROW_COLUMNS:
    raise RuntimeError(f"journal_entries' columns are {[c.name for c in journal_entries.columns]}, not {_ROW_COLUMNS}")


def _insert_sql(conn: Connection) -> str:
    """The journal's INSERT in the dialect's own parameter style, compiled once per dialect.

    Appends run it with ``exec_driver_sql`` and tuples: no statement compiled, cached or bound
    per append (every column is a plain string or integer, so there is nothing to convert)."""
    return driver_sql(conn, "journal insert", lambda: insert(journal_entries), _ROW_COLUMNS, column_keys=_ROW_COLUMNS)


def _rows_sql(conn: Connection, count: int) -> str:
    """The journal's INSERT of ``count`` rows in one statement (``numeric_dollar``: a ``Piece``)."""
    head, _, row = _insert_sql(conn).partition(" VALUES ")
    width = len(_ROW_COLUMNS)
    return f"{head} VALUES {', '.join(renumbered(row, i * width) for i in range(count))}"


def _translate(session_id: str, entries: list[JournalEntry], exc: Exception) -> Exception:
    if isinstance(exc, IntegrityError):
        seqs = [e.seq for e in entries]
        return Conflict(f"journal of {session_id!r} already holds one of seqs {seqs}")
    if isinstance(exc, DBAPIError):
        return Unavailable(f"journal write failed: {exc.orig!r}")
    return exc


def _as_entries(rows: Sequence[Any]) -> list[JournalEntry]:
    """Rows of ``journal_entries`` (every column, in ``_ROW_COLUMNS`` order: SQLAlchemy's rows or asyncpg's records)."""
    return [
        JournalEntry(
            seq=row[2], kind=EntryKind(row[3]), turn_id=row[4], external_event_id=row[5], at=row[6],
            payload=orjson.loads(row[7]),
        )
        for row in rows
    ]
