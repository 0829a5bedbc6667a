"""SQL history journal with group commit.

``append`` queues its entries and awaits a future; one background writer task
takes everything queued, writes it in ONE transaction, and resolves every
caller's future after the commit. While a commit is in flight new appends queue
up, so under load many sessions share each transaction (classic group commit)
without any fixed delay. If a batch fails, its appends are retried one by one so
a single bad append (e.g. a taken seq → ``Conflict``) cannot fail the others.
Entries are durable (committed) when ``append`` returns.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson
from sqlalchemy import delete, insert, select
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from core.engine.journal import EntryKind, JournalEntry
from core.errors import Conflict, Unavailable
from core.store.committer import GroupCommitter
from core.store.journal_tables import journal_entries

DEFAULT_MAX_BATCH_ENTRIES = 5000


@dataclass
class _Pending:
    session_id: str
    entries: list[JournalEntry]
    done: asyncio.Future[None]


class SqlHistoryJournal:
    """``HistoryJournal`` on SQLAlchemy async (SQLite or PostgreSQL). Call ``aclose`` at shutdown."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_batch_entries: int = DEFAULT_MAX_BATCH_ENTRIES,
        committer: GroupCommitter | None = None,
    ) -> None:
        self._engine = engine
        self._committer = committer
        self._max_batch_entries = max_batch_entries
        self._queue: asyncio.Queue[_Pending | None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.transactions = 0
        self.appends = 0

    async def append(self, session_id: str, entries: list[JournalEntry]) -> None:
        """Durably append (group-committed); Conflict when a seq is already taken."""
        if not entries:
            return
        queue = self._ensure_writer()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.put_nowait(_Pending(session_id, list(entries), done))
        # Shield: a cancelled caller must not cancel the shared write; it still lands.
        await asyncio.shield(done)

    async def load(self, session_id: str) -> list[JournalEntry]:
        """Every entry of the session in seq order."""
        query = select(journal_entries).where(journal_entries.c.session_id == session_id).order_by(journal_entries.c.seq)
        try:
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        except DBAPIError as exc:
            raise Unavailable(f"journal read failed: {exc.orig!r}") from exc
        return [
            JournalEntry(
                seq=row.seq, kind=EntryKind(row.kind), turn_id=row.turn_id,
                external_event_id=row.external_event_id, at=row.at, payload=orjson.loads(row.payload),
            )
            for row in rows
        ]

    async def clear(self, session_id: str) -> None:
        """Delete the session's history."""
        async with self._engine.begin() as conn:
            await conn.execute(delete(journal_entries).where(journal_entries.c.session_id == session_id))

    async def aclose(self) -> None:
        """Flush queued appends and stop the writer task."""
        if self._writer is None or self._queue is None:
            return
        if self._loop is asyncio.get_running_loop() and not self._writer.done():
            self._queue.put_nowait(None)
            await self._writer
        self._writer = None
        self._queue = None

    def _ensure_writer(self) -> asyncio.Queue[_Pending | None]:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._writer is None or self._writer.done() or self._loop is not loop:
            self._queue = asyncio.Queue()
            self._loop = loop
            self._writer = loop.create_task(self._run(self._queue), name="journal-group-commit")
        return self._queue

    async def _run(self, queue: asyncio.Queue[_Pending | None]) -> None:
        stopping = False
        while not stopping:
            first = await queue.get()
            if first is None:
                return
            batch = [first]
            size = len(first.entries)
            while not queue.empty() and size < self._max_batch_entries:
                item = queue.get_nowait()
                if item is None:
                    stopping = True
                    break
                batch.append(item)
                size += len(item.entries)
            await self._write_batch(batch)

    async def _write_batch(self, batch: list[_Pending]) -> None:
        try:
            await self._write(batch)
        except Exception as exc:
            if len(batch) == 1:
                _fail(batch[0], _translate(batch[0], exc))
                return
            for pending in batch:
                try:
                    await self._write([pending])
                except Exception as single_exc:
                    _fail(pending, _translate(pending, single_exc))
                else:
                    _succeed(pending)
            return
        for pending in batch:
            _succeed(pending)

    async def _write(self, batch: list[_Pending]) -> None:
        rows = [
            {
                "session_id": p.session_id, "seq": e.seq, "kind": e.kind.value, "turn_id": e.turn_id,
                "external_event_id": e.external_event_id, "at": e.at, "payload": orjson.dumps(e.payload).decode(),
            }
            for p in batch
            for e in p.entries
        ]
        if self._committer is not None:
            # Shares the process-wide group transaction with the other writers.
            await self._committer.run(lambda conn: conn.execute(insert(journal_entries), rows))  # sync op
        else:
            async with self._engine.begin() as conn:
                await conn.execute(insert(journal_entries), rows)
        self.transactions += 1
        self.appends += len(batch)


def _translate(pending: _Pending, exc: Exception) -> Exception:
    if isinstance(exc, IntegrityError):
        seqs = [e.seq for e in pending.entries]
        error: Exception = Conflict(f"journal of {pending.session_id!r} already holds one of seqs {seqs}")
    elif isinstance(exc, DBAPIError):
        error = Unavailable(f"journal write failed: {exc.orig!r}")
    else:
        return exc
    error.__cause__ = exc
    return error


def _succeed(pending: _Pending) -> None:
    if not pending.done.done():
        pending.done.set_result(None)


def _fail(pending: _Pending, error: Exception) -> None:
    if not pending.done.done():
        pending.done.set_exception(error)
