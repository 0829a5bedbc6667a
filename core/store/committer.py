"""Group commit: many small writes from many sessions share one transaction.

Every write in turnstile is a short synchronous function of a connection
(stage an inbox batch, append journal entries, upsert a session record, mark
messages done). ``GroupCommitter.run(op)`` queues it; one writer task takes
everything queued, runs it in a single transaction and resolves each caller
after the commit, so a caller's write is durable when ``run`` returns, exactly
as with its own transaction. While one transaction commits, the next batch
gathers, so batches grow with load. If a batch fails, its operations are
retried one by one, so one bad write cannot fail its neighbours.

Writes nobody waits for on a turn's path (``run(op, lazy=True)``: turn
bookkeeping of session records, inbox status marks) do not start a transaction
of their own while the writer is idle: they wait, at most ``lazy_wait_s``, for
the next write that does (a session's next staging or journal append) and commit
in its transaction, in queue order, or alone once the wait is over (or at
``hurry()`` / ``aclose()``). So at one session a plain message commits twice
instead of four times. Order is kept: every transaction takes the whole queue
in arrival order, so no write ever commits before a lazy write queued earlier.

On SQLite (``synchronous=NORMAL``, the default) the transaction runs on the
event loop's own thread, on a dedicated synchronous connection: a group of small inserts and upserts in WAL mode costs
~0.1 ms there, while a hand-off to a writer thread cost ~0.5–0.8 ms per
transaction under load (thread wake-ups and the GIL passed back and forth), on
the critical path of every turn. The loop never waits for SQLite's write lock:
if another connection holds it, that transaction runs in a thread that waits
(busy timeout) instead. The WAL is checkpointed by a thread of its own in the background
(``core/store/wal_checkpoints.py``), never by a commit. With
``synchronous=FULL`` (each commit fsyncs) transactions always run in the thread. Elsewhere
(PostgreSQL) the transaction runs on the async database engine via ``run_sync``: ``BEGIN``, the
statements and ``COMMIT``, each a round trip. A write of exactly one statement
(``run(op, one_statement=True)``) that is alone in its batch skips the ``BEGIN`` and ``COMMIT``
round trips: it runs in autocommit, where PostgreSQL commits the statement as its own
transaction before it answers (durable on return, as ``synchronous_commit`` is on; one
statement, so as atomic as the explicit transaction). Those autocommit statements run on one connection the
writer keeps between them (``_on_held``; ``aclose`` gives it back to the pool, so call it before disposing the
engine): a pool checkout and return around each cost ~0.18 ms of a ~0.7 ms one-row write (0.69–0.77 → 0.51–0.53 ms
measured through ``run``, paced), on the serial path of every message. A batch whose every write also comes as a
``Piece`` (``run(op, piece=...)``: one data-modifying statement, e.g. a turn's answer appended to the
journal with the lazy ``turn_started`` record upsert queued before it, or a message's staging with the lazy
inbox marks queued before it; at most ``MAX_JOINED``) runs the same way as ONE statement,
``WITH w0 AS (…), w1 AS (…) SELECT pg_notify(…)`` (``core/store/driver_sql.py``): one round trip instead of
``BEGIN``, a statement each and ``COMMIT``; a lone piece runs as its piece too. Pieces are sent on the held
connection's asyncpg connection itself (``send_pieces``: ~140 µs of client CPU a statement, where SQLAlchemy's
``exec_driver_sql`` took ~290). If it fails, its writes are retried one by one in transactions of
their own, as a failed group transaction's are.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from core.store.db import SQLITE_BUSY_TIMEOUT_MS, create_sqlite_writer_engine
from core.store.driver_sql import Piece, joinable, send_pieces
from core.store.wal_checkpoints import WalCheckpoints

log = logging.getLogger(__name__)

T = TypeVar("T")
Operation = Callable[[Connection], Any]

DEFAULT_MAX_BATCH_OPS = 512
# How long a lazy write waits for a write that is waited for, to share its transaction.
DEFAULT_LAZY_WAIT_S = 0.05
# PostgreSQL: at most this many writes join in one statement (the answer and its ``turn_started``
# record). Each distinct shape of joined statement is prepared once per connection (asyncpg's
# statement cache): larger batches keep their transaction, whose statements' shapes are few.
MAX_JOINED = 2


@dataclass
class _Queued:
    op: Operation
    done: asyncio.Future[Any]
    lazy: bool = False
    one_statement: bool = False
    piece: Callable[[Connection], Piece] | None = None


_HURRY = object()  # queued by ``hurry``: commit the lazy writes now


def _run_all(conn: Connection, ops: list[Operation]) -> list[Any]:
    return [op(conn) for op in ops]


class GroupCommitter:
    """One writer per engine; ``run(op)`` returns op's result once its transaction committed."""

    def __init__(
        self,
        db_engine: AsyncEngine,
        max_batch_ops: int = DEFAULT_MAX_BATCH_OPS,
        *,
        sqlite_synchronous: str = "NORMAL",
        lazy_wait_s: float = DEFAULT_LAZY_WAIT_S,
    ) -> None:
        self._db_engine = db_engine
        # PostgreSQL: a lone one-statement write commits as its own statement (no BEGIN/COMMIT round trips).
        self._autocommit = (
            db_engine.execution_options(isolation_level="AUTOCOMMIT") if db_engine.dialect.name == "postgresql" else None
        )
        self._held: AsyncConnection | None = None  # PostgreSQL: the autocommit connection of ``_on_held``
        self._held_loop: asyncio.AbstractEventLoop | None = None
        self._lazy_wait_s = lazy_wait_s
        # With synchronous=FULL every commit fsyncs: those run in the thread, never on the loop.
        self._inline = sqlite_synchronous == "NORMAL"
        self._max_batch_ops = max_batch_ops
        # What the writer takes next (a deque and an event for its one consumer: no ``asyncio.Queue``
        # put/get and getter future per write, no ``asyncio.timeout`` per wait for company).
        self._queue: deque[_Queued | object | None] | None = None
        self._queued = asyncio.Event()  # set by every put (and by the lazy wait's timer)
        self._writer: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sync_engine: Engine | None = None
        self._writer_conn: Connection | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._wal: WalCheckpoints | None = None
        if db_engine.dialect.name == "sqlite":
            self._sync_engine = create_sqlite_writer_engine(db_engine, sqlite_synchronous)
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer")
            self._wal = WalCheckpoints(self._sync_engine.url.database or "")
        self.transactions = 0
        self.operations = 0
        self.waited = 0  # SQLite transactions that found the write lock taken and ran in the thread

    async def run(
        self, op: Callable[[Connection], T], *, lazy: bool = False, one_statement: bool = False,
        piece: Callable[[Connection], Piece] | None = None,
    ) -> T:
        """Run ``op`` inside the next group transaction; raises what ``op`` raised on its own.

        ``lazy``: nobody waits for it on a turn's path; it may wait up to ``lazy_wait_s``
        for a write that is waited for, to share its transaction (still durable on return).
        ``one_statement``: ``op`` executes exactly one statement (PostgreSQL runs it alone in
        autocommit when nothing else is queued with it).
        ``piece``: the same write as one statement that can join others (PostgreSQL runs a batch
        of such writes as one statement in autocommit, and a lone one whose ``op`` is not
        ``one_statement`` as its piece); its ``result`` is ``op``'s.
        """
        queue = self._ensure_writer()
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        queue.append(_Queued(op, done, lazy, one_statement, piece))
        self._queued.set()
        # A cancelled caller cancels only its own future: the queued op still runs in the next
        # group transaction (the writer never looks at the future before it settles it).
        result: T = await done
        return result

    def hurry(self) -> None:
        """Commit the lazy writes waiting for company now (someone waits for one of them)."""
        if self._queue is not None and self._writer is not None and not self._writer.done():
            self._queue.append(_HURRY)
            self._queued.set()

    def _ensure_writer(self) -> deque[_Queued | object | None]:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._writer is None or self._writer.done() or self._loop is not loop:
            self._queue = deque()
            self._queued = asyncio.Event()
            self._loop = loop
            self._writer = loop.create_task(self._run(self._queue), name="group-commit")
        return self._queue

    async def aclose(self) -> None:
        """Write what is queued, stop the writer, release the writer thread and connection."""
        writer = self._writer
        on_its_loop = self._loop is asyncio.get_running_loop()
        if writer is not None and self._queue is not None and on_its_loop and not writer.done():
            self._queue.append(None)
            self._queued.set()
            await writer
        self._writer = None
        self._queue = None
        if on_its_loop:
            await self._drop_held()
        if self._thread is not None:
            if self._sync_engine is not None:
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(self._thread, self._drop_writer_connection)
                await loop.run_in_executor(self._thread, self._sync_engine.dispose)
            self._thread.shutdown(wait=True)
            self._thread = None
        if self._wal is not None:
            self._wal.shutdown()
            self._wal = None

    async def _run(self, queue: deque[_Queued | object | None]) -> None:
        queued = self._queued
        loop = asyncio.get_running_loop()
        stopping = False
        while not stopping:
            while not queue:
                queued.clear()
                await queued.wait()
            item = queue.popleft()
            batch: list[_Queued] = []
            waited_for = False  # someone waits for a write of the batch (or hurried): commit now
            waited = False  # lazy writes wait for company once per batch, at most lazy_wait_s
            while True:
                if item is None:
                    stopping = True
                    break
                if isinstance(item, _Queued):
                    batch.append(item)
                    waited_for = waited_for or not item.lazy
                else:  # _HURRY
                    waited_for = True
                if len(batch) >= self._max_batch_ops:
                    break
                if queue:
                    item = queue.popleft()
                    continue
                if waited_for or waited or not batch:
                    break
                waited = True
                # Cancelled (the writer stopped), the wait leaves what is queued in the queue.
                queued.clear()
                timer = loop.call_later(self._lazy_wait_s, queued.set)
                try:
                    await queued.wait()
                finally:
                    timer.cancel()
                if not queue:
                    break  # the wait is over without company
                item = queue.popleft()
            if batch:
                await self._commit(batch)

    async def _commit(self, batch: list[_Queued]) -> None:
        try:
            results = await self._autocommitted(batch) if self._autocommit is not None else None
            if results is None:
                results = await self._transaction([q.op for q in batch])
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch[0], exc=exc)
                return
            log.debug("group transaction of %d failed (%r); retrying one by one", len(batch), exc)
            for queued in batch:
                try:
                    (result,) = await self._transaction([queued.op])
                except Exception as single_exc:
                    _settle(queued, exc=single_exc)
                else:
                    _settle(queued, result=result)
            return
        for queued, result in zip(batch, results, strict=False):
            _settle(queued, result=result)

    async def _transaction(self, ops: list[Operation]) -> list[Any]:
        if self._sync_engine is not None and self._thread is not None:
            loop = asyncio.get_running_loop()
            results = None
            if self._inline:
                try:
                    results = self._sync_transaction(ops)
                except (OperationalError, sqlite3.OperationalError) as exc:
                    if not _lock_taken(exc):
                        raise
                    self.waited += 1
            if results is None:  # the lock was taken, or commits fsync: in the thread, which may wait
                results = await loop.run_in_executor(self._thread, self._sync_transaction, ops, True)
            if self._wal is not None:
                self._wal.committed(loop, len(ops))
        else:
            async with self._db_engine.begin() as conn:
                results = await conn.run_sync(_run_all, ops)
        self.transactions += 1
        self.operations += len(ops)
        return results

    async def _autocommitted(self, batch: list[_Queued]) -> list[Any] | None:
        """PostgreSQL: the batch as ONE statement in autocommit, when it can be (None: it needs a transaction).
        Writes that all come as pieces are sent joined (``_joined``), a lone one too; a lone one-statement
        write without a piece runs its ``op``."""
        pieces = [q.piece for q in batch if q.piece is not None]
        if len(pieces) == len(batch) <= MAX_JOINED:
            joined = await self._joined(pieces)
            if joined is not None:
                return joined
        if len(batch) == 1 and batch[0].one_statement:
            return [await self._statement(batch[0].op)]
        return None

    async def _statement(self, op: Operation) -> Any:
        """PostgreSQL: one statement in autocommit, committed by the server before it answers."""
        result = await self._on_held(op)
        self.transactions += 1
        self.operations += 1
        return result

    async def _on_held(self, op: Operation) -> Any:
        """PostgreSQL: ``op`` on the writer's autocommit connection (``_held_connection``)."""
        conn = await self._held_connection()
        try:
            result = await conn.run_sync(_then_commit, op)
        except BaseException:
            await self._drop_held()
            raise
        return result

    async def _held_connection(self) -> AsyncConnection:
        """PostgreSQL: the writer's autocommit connection, opened on first use and kept. Only the writer task
        uses it, one statement at a time. After any failure it is closed and the next statement opens another:
        a connection the server dropped is never used twice."""
        conn, loop = self._held, asyncio.get_running_loop()
        if conn is not None and self._held_loop is not loop:
            conn = None  # opened on another event loop (tests): left to that loop's pool
        if conn is None or conn.closed or conn.invalidated:
            assert self._autocommit is not None
            conn = self._held = await self._autocommit.connect()
            self._held_loop = loop
        return conn

    async def _drop_held(self) -> None:
        conn, self._held = self._held, None
        if conn is not None:
            try:
                await conn.close()
            except Exception as exc:  # already broken: the pool discards it
                log.debug("closing the writer's PostgreSQL connection failed: %r", exc)

    async def _joined(self, pieces: list[Callable[[Connection], Piece]]) -> list[Any] | None:
        """PostgreSQL: a batch of pieces as ONE statement in autocommit, sent on the held connection's asyncpg
        connection (``send_pieces``); None (nothing run) when they cannot join (``joinable``)."""
        conn = await self._held_connection()
        sync = conn.sync_connection
        assert sync is not None
        built = [piece(sync) for piece in pieces]  # a piece only compiles its SQL for the connection's dialect
        if not joinable(built):
            return None
        try:
            results = await send_pieces(conn, built)  # a connection left in doubt is invalidated there
        except BaseException:
            await self._drop_held()
            raise
        self.transactions += 1
        self.operations += len(pieces)
        return results

    def _sync_transaction(self, ops: list[Operation], wait: bool = False) -> list[Any]:
        conn = self._writer_connection()
        # On the DBAPI connection: a statement through SQLAlchemy would begin the transaction.
        raw = conn.connection.driver_connection
        assert raw is not None
        if wait:  # in the thread: wait for the write lock like any other connection
            raw.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        try:
            with conn.begin():  # pysqlite's own begin is a no-op: BEGIN IMMEDIATE is ours
                raw.execute("BEGIN IMMEDIATE")
                return _run_all(conn, ops)
        except BaseException:
            if conn.invalidated or conn.closed:
                self._drop_writer_connection()
            raise
        finally:
            if wait and not conn.closed:
                raw.execute("PRAGMA busy_timeout=0")

    def _writer_connection(self) -> Connection:
        """The writer's one connection, kept open between transactions (no pool checkout each time)."""
        if self._writer_conn is None or self._writer_conn.closed or self._writer_conn.invalidated:
            assert self._sync_engine is not None
            self._writer_conn = self._sync_engine.connect()
        return self._writer_conn

    def _drop_writer_connection(self) -> None:
        conn, self._writer_conn = self._writer_conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception as exc:  # already broken: nothing more to release
                log.debug("closing the SQLite writer connection failed: %r", exc)


def _then_commit(conn: Connection, op: Operation) -> Any:
    """``op``, then the end of SQLAlchemy's own transaction (in autocommit nothing is sent), in one greenlet."""
    result = op(conn)
    conn.commit()
    return result


def _lock_taken(exc: OperationalError | sqlite3.OperationalError) -> bool:
    """SQLite refused BEGIN IMMEDIATE because another connection holds the write lock (raised by
    the DBAPI connection itself, or by a statement through SQLAlchemy)."""
    reason = str(exc.orig if isinstance(exc, OperationalError) else exc)
    return "locked" in reason or "busy" in reason


def _settle(queued: _Queued, *, result: Any = None, exc: BaseException | None = None) -> None:
    if queued.done.done():
        return
    if exc is not None:
        queued.done.set_exception(exc)
    else:
        queued.done.set_result(result)
