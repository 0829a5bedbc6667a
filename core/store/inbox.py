"""The durable inbox adapter (``core.inbox.Inbox``): inbound messages staged before they are acknowledged (MQ-8).

A fetched batch is staged in one transaction (group commit) and only then
acked. Staging is idempotent on (platform, message id), so a redelivered or
replayed message is never staged twice. Rows stay ``staged`` until their turn
is finished (``done``) or they are dropped as stale (``dropped``); on restart,
``pending()`` hands the unfinished ones back to their session actors in order.
Status marks are written in batches in the background, as lazy writes of the
group committer (they share the transaction of the next staging or journal
append): a lost mark only makes a finished message be looked at again, which
the actor recognises. On PostgreSQL a flush's marks are one array ``UPDATE`` and
a lone unfenced staging one ``INSERT``, each a ``Piece``: the marks and the next
message's staging commit as ONE statement, not ``BEGIN``, two statements and
``COMMIT`` (4 round trips) on that message's path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    UniqueConstraint,
    and_,
    bindparam,
    delete,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.expression import Insert, Update

from core.errors import OwnershipLost
from core.inbox import DONE, DROPPED, STAGED, StagedMessage
from core.store.committer import GroupCommitter
from core.store.db import metadata, upsert_insert
from core.store.driver_sql import Piece, driver_sql, joins_pieces, renumbered, run_rows
from core.store.partition_epochs import WriteFence, claims_of, epochs_hold

log = logging.getLogger(__name__)
T = TypeVar("T")

PRUNE_EVERY_S = 3600.0
# A prune deletes at most this many rows a transaction: on SQLite the committer runs its transactions on the
# event loop, and an hour of finished rows deleted in one (tens of thousands at a few messages a second)
# would hold every session's turn for that long.
PRUNE_CHUNK_ROWS = 500
# A failed write of status marks is retried after 0.5 s, 1 s, 2 s ... at most MARKS_RETRY_MAX_S apart.
MARKS_RETRY_BASE_S = 0.5
MARKS_RETRY_MAX_S = 5.0

inbox = Table(
    "inbox",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("platform", String(64), nullable=False),
    Column("message_id", String(256), nullable=False),
    Column("session_id", String(512), nullable=True),
    Column("generation", BigInteger, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("status", String(16), nullable=False),
    Column("staged_at", Float, nullable=False),
    Column("finished_at", Float, nullable=True),
    UniqueConstraint("platform", "message_id", name="uq_inbox_platform_message"),
    Index("ix_inbox_status_id", "status", "id"),
    # The prune's range (``forget_finished``): without it, every prune read the whole table, i.e. the
    # inbound retention's worth of finished rows (7 days by default), to find the oldest hour of them.
    Index("ix_inbox_finished_at", "finished_at"),
)


class SqlInbox:
    """The ``Inbox`` port over the inbox table: group-committed staging and batched status marks."""

    def __init__(self, db_engine: AsyncEngine, committer: GroupCommitter | None = None) -> None:
        self._db_engine = db_engine
        self._committer = committer
        self._marks: dict[tuple[str, str], str] = {}
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        self._flush_lock = asyncio.Lock()
        self._pruner: asyncio.Task[None] | None = None
        # Partitioned: staging carries the partition epochs held (core/store/partition_epochs.py).
        self.fence: WriteFence | None = None
        # PostgreSQL (asyncpg): a lone staging and the marks can join in one statement (``Piece``).
        self._joins = joins_pieces(db_engine)

    def start(self, retention_s: float | None = None) -> None:
        """Start writing marks in the background; with ``retention_s``, also prune finished rows
        older than that (a replay from the inbound stream can be no older than its max age)."""
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_loop(), name="inbox-marks")
        if retention_s is not None and self._pruner is None:
            self._pruner = asyncio.create_task(self._prune_loop(retention_s), name="inbox-prune")

    async def stage(self, messages: Sequence[StagedMessage]) -> list[bool]:
        """Stage a batch in one transaction; True for each message that was not staged before.
        Raises ``OwnershipLost`` (nothing staged) when a fenced partition's epoch is not ours."""
        if not messages:
            return []
        now = time.time()
        claims = claims_of(self.fence, {m.session_id for m in messages})
        first: dict[tuple[str, str], StagedMessage] = {}
        for m in messages:  # the first occurrence of each key, in arrival order
            first.setdefault(m.key, m)
        values = [(m.platform, m.message_id, m.session_id, m.generation, m.payload, STAGED, now) for m in first.values()]

        def op(conn: Connection) -> set[tuple[str, str]] | None:
            # Insert what is new, skip what is staged already (a redelivery or a replay), and
            # return the keys that were inserted (RETURNING), in one transaction; None: refused.
            if not epochs_hold(conn, claims):
                return None  # an answer, not an error: the group transaction goes on
            # A backlog's batch: multi-row statements of 2**k rows each, compiled once per k (a
            # batch of 100 runs 64 + 32 + 4 rows), bound with the rows' values in one flat tuple.
            inserted: set[tuple[str, str]] = set()
            at = 0
            while at < len(values):
                size = 1 << min((len(values) - at).bit_length() - 1, _STAGE_MAX_ROWS_LOG2)
                chunk = values[at:at + size]
                params = chunk[0] if size == 1 else tuple(v for row in chunk for v in row)
                inserted.update((r[0], r[1]) for r in conn.exec_driver_sql(_stage_sql(conn, size), params).all())
                at += size
            return inserted

        # Unfenced, a live chat's message is one INSERT: alone in its batch it commits as that statement,
        # and on PostgreSQL it joins the lazy marks queued before it in one statement (a ``Piece``).
        alone = not claims and len(first) == 1
        piece = None
        if alone and self._joins:
            (key,) = first
            piece = lambda conn: Piece(  # noqa: E731
                _stage_sql(conn, 1), values[0], returned=lambda rows: {key} if rows else set()
            )
        inserted = await self._write(op, one_statement=alone, piece=piece)
        if inserted is None:
            raise OwnershipLost(f"{len(messages)} messages not staged: their partition has a newer owner")
        seen: set[tuple[str, str]] = set()
        result = []
        for m in messages:
            result.append(m.key in inserted and m.key not in seen)
            seen.add(m.key)
        return result

    async def _write(
        self, op: Callable[[Connection], T], *, lazy: bool = False, one_statement: bool = False,
        piece: Callable[[Connection], Piece] | None = None,
    ) -> T:
        if self._committer is not None:
            return await self._committer.run(op, lazy=lazy, one_statement=one_statement, piece=piece)
        async with self._db_engine.begin() as conn:
            return await conn.run_sync(op)

    async def pending(self) -> list[StagedMessage]:
        """Every staged, unfinished message in staging order."""
        async with self._db_engine.connect() as conn:
            rows = await conn.execute(
                select(
                    inbox.c.platform, inbox.c.message_id, inbox.c.session_id, inbox.c.generation, inbox.c.payload
                )
                .where(inbox.c.status == STAGED)
                .order_by(inbox.c.id)
            )
            return [StagedMessage(r[0], r[1], r[2], int(r[3]), bytes(r[4])) for r in rows]

    async def status_of(self, platform: str, message_id: str) -> str | None:
        """``staged``, ``done``, ``dropped``, or None for a message the inbox does not hold."""
        await self.flush()
        async with self._db_engine.connect() as conn:
            row = (
                await conn.execute(
                    select(inbox.c.status).where(
                        and_(inbox.c.platform == platform, inbox.c.message_id == message_id)
                    )
                )
            ).first()
            return None if row is None else str(row[0])

    def mark(self, message: StagedMessage, status: str) -> None:
        """Record that a message finished (``done``) or was dropped; written in the next batch."""
        self._marks[message.key] = status
        self._wake.set()

    async def flush(self) -> None:
        """Write the queued status marks now (waits for a flush already under way)."""
        if self._committer is not None:
            self._committer.hurry()  # a background flush may be waiting to share a transaction
        async with self._flush_lock:
            await self._flush_locked()

    async def _flush_lazily(self) -> None:
        """The background flush: the marks ride on the next write that is waited for."""
        async with self._flush_lock:
            await self._flush_locked(lazy=True)

    async def _flush_locked(self, *, lazy: bool = False) -> None:
        if not self._marks:
            return
        marks, self._marks = self._marks, {}
        now = time.time()
        params = [(s, now, k[0], k[1]) for k, s in marks.items()]
        piece = None
        if self._joins:  # PostgreSQL: every mark in one statement, which can join the next staging's
            arrays = (now, list(marks.values()), [k[0] for k in marks], [k[1] for k in marks])
            piece = lambda _conn: Piece(_MARKS_PG, arrays)  # noqa: E731
        try:
            await self._write(lambda conn: run_rows(conn, _mark_sql(conn), params), lazy=lazy, piece=piece)
        except Exception:
            # Put them back (newer marks win); the next flush retries.
            for k, s in marks.items():
                self._marks.setdefault(k, s)
            raise

    async def forget_finished(self, older_than_s: float) -> int:
        """Delete rows finished more than ``older_than_s`` ago; staged rows always stay.

        ``PRUNE_CHUNK_ROWS`` at a time, each chunk a write of its own (other writes commit between them),
        found through ``ix_inbox_finished_at``: the oldest rows are read, not the table."""
        cutoff = time.time() - older_than_s
        oldest = (
            select(inbox.c.id)
            .where(and_(inbox.c.finished_at < cutoff, inbox.c.status != STAGED))
            .limit(PRUNE_CHUNK_ROWS)
        )
        removed: list[int] = []

        def op(conn: Connection) -> None:
            removed.append(int(conn.execute(delete(inbox).where(inbox.c.id.in_(oldest))).rowcount or 0))

        total = 0
        while True:
            removed.clear()
            await self._write(op)
            # The last run's count: a group transaction that failed runs its writes again one by one.
            total += removed[-1]
            if removed[-1] < PRUNE_CHUNK_ROWS or self._closing:
                return total

    async def _prune_loop(self, retention_s: float) -> None:
        every_s = min(PRUNE_EVERY_S, max(retention_s / 4, 1.0))
        while not self._closing:
            try:
                pruned = await self.forget_finished(retention_s)
                if pruned:
                    log.info("pruned %d finished inbox rows", pruned)
            except Exception as exc:
                log.warning("pruning the inbox failed: %r", exc)
            await asyncio.sleep(every_s)

    async def _flush_loop(self) -> None:
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            # A failed flush put its marks back: retry with backoff until the database answers.
            # A plain loop, not a retry library: its per-call state is cyclic garbage, one per
            # flush, which the served process's young collections then walk while the loop waits.
            failures = 0
            while True:
                try:
                    await self._flush_lazily()
                    break
                except Exception as exc:
                    failures += 1
                    log.error("writing inbox marks failed (attempt %d); retrying: %r", failures, exc)
                await asyncio.sleep(min(MARKS_RETRY_MAX_S, MARKS_RETRY_BASE_S * 2 ** (failures - 1)))

    async def close(self) -> None:
        """Stop the background work and write what is queued."""
        self._closing = True
        self._wake.set()
        if self._pruner is not None:
            self._pruner.cancel()
            await asyncio.gather(self._pruner, return_exceptions=True)
            self._pruner = None
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        await self.flush()


# The columns of a staged row, in the order of the tuples ``stage`` builds.
_STAGE_COLUMNS = ("platform", "message_id", "session_id", "generation", "payload", "status", "staged_at")
# Rows of one staging statement at most: 2**8 (7 binds a row, well within SQLite's and PostgreSQL's 32,766).
_STAGE_MAX_ROWS_LOG2 = 8


def _stage_insert(conn: Connection) -> Insert:
    """INSERT … ON CONFLICT DO NOTHING RETURNING (platform, message_id): what is new gets staged."""
    return upsert_insert(conn.dialect.name)(inbox).on_conflict_do_nothing().returning(inbox.c.platform, inbox.c.message_id)


_STAGE_SQL: dict[tuple[str, str, int], str] = {}


def _stage_sql(conn: Connection, rows: int = 1) -> str:
    """The staging INSERT of ``rows`` rows, bound with one tuple of the rows' values in ``_STAGE_COLUMNS``
    order, row after row. The one-row statement is compiled once per dialect; a multi-row one repeats
    its VALUES group (what SQLAlchemy's insertmanyvalues does per batch), numbering ``$n`` on
    PostgreSQL, made once per dialect and row count."""
    key = (conn.dialect.name, conn.dialect.driver, rows)
    sql = _STAGE_SQL.get(key)
    if sql is None:
        one = driver_sql(conn, "inbox stage", lambda: _stage_insert(conn), _STAGE_COLUMNS, column_keys=_STAGE_COLUMNS)
        sql = _STAGE_SQL[key] = one if rows == 1 else _repeat_values(one, rows)
    return sql


_PLACEHOLDER = re.compile(r"\?|\$(\d+)")


def _repeat_values(one_row: str, rows: int) -> str:
    """``one_row``'s VALUES group ``rows`` times; RuntimeError if the statement is not shaped as expected."""
    head, values, rest = one_row.partition(" VALUES (")
    group, close, tail = rest.partition(") ON CONFLICT ")
    width = len(_STAGE_COLUMNS)
    numbered = [m[1] for m in _PLACEHOLDER.finditer(group)]
    if not values or not close or len(numbered) != width or "(" in group or ")" in group:
        raise RuntimeError(f"inbox stage: unexpected statement shape {one_row!r}")
    if numbered[0] is None:  # qmark
        groups = [f"({group})"] * rows
    else:  # numeric_dollar: group k binds the k-th row's values
        groups = [f"({renumbered(group, k * width - int(numbered[0]) + 1)})" for k in range(rows)]
    return f"{head} VALUES {', '.join(groups)} ON CONFLICT {tail}"


# PostgreSQL: a flush's marks as ONE statement (its rows' columns as arrays), so it can be a ``Piece``.
_MARKS_PG = (
    "UPDATE inbox SET status = v.status, finished_at = $1"
    " FROM unnest($2::varchar[], $3::varchar[], $4::varchar[]) AS v(status, platform, message_id)"
    " WHERE inbox.platform = v.platform AND inbox.message_id = v.message_id"
)


def _mark_sql(conn: Connection) -> str:
    """The status mark UPDATE, compiled once per dialect; bound with (status, finished_at, platform, message_id)."""

    def build() -> Update:
        return (
            update(inbox)
            .where(and_(inbox.c.platform == bindparam("p"), inbox.c.message_id == bindparam("m")))
            .values(status=bindparam("s"), finished_at=bindparam("f"))
        )

    return driver_sql(conn, "inbox mark", build, ("s", "f", "p", "m"))


__all__ = ["DONE", "DROPPED", "STAGED", "SqlInbox", "StagedMessage", "inbox"]
