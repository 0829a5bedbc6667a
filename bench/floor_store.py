"""Where the guarantee floor (bench/floor.py) commits: a SQLite file, or a PostgreSQL database.

Two tables, the least the floor's guarantees need: ``inbox`` (a fetched message staged before it is
acked) and ``journal`` (a session's user message and answer, committed before the checkpoint that
follows them). A write is ``(table, rows)``; every write queued while a transaction runs goes into
the next one (group commit), and a caller's write is durable when ``write`` returns.

- **SQLite** (``SqliteStore``): turnstile's pragmas (``core/store/db.py``: WAL, busy timeout,
  ``synchronous`` from ``TURNSTILE_SQLITE_SYNCHRONOUS``, default NORMAL, no checkpoint on commit); the
  transaction runs on the event loop with NORMAL and in a writer thread with FULL, and the WAL is
  checkpointed by turnstile's ``core/store/wal_checkpoints.WalCheckpoints``, as ``core/store/committer.py``
  does.
- **PostgreSQL** (``PgStore``, asyncpg): a group is ONE statement in autocommit, its rows passed as
  arrays (``WITH i AS (INSERT INTO inbox SELECT * FROM unnest(…)), j AS (INSERT INTO journal …) SELECT 1``):
  one round trip and one durable commit (``synchronous_commit`` as the server has it, on by default),
  the fewest a group commit on PostgreSQL can take. Turnstile's committer takes the same one round trip
  for a lone write or two joined ones (``core/store/committer.py``), and ``BEGIN``, a statement each and
  ``COMMIT`` for a larger group. Reads (a session's journal on its first message in a process) go
  through a small pool of their own.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import asyncpg

from core.store.db import SQLITE_BUSY_TIMEOUT_MS
from core.store.wal_checkpoints import WalCheckpoints

Write = tuple[str, list[tuple[Any, ...]]]  # a table ("inbox" or "journal") and the rows to insert
TABLES = ("inbox", "journal")
SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS inbox (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, body BLOB NOT NULL, staged_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS journal (session_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,"
    " body BLOB NOT NULL, PRIMARY KEY (session_id, seq))",
)
SQLITE_INSERT = {  # a copy of a message sent again after a lost ack is staged once
    "inbox": "INSERT OR IGNORE INTO inbox VALUES (?, ?, ?, ?)",
    "journal": "INSERT INTO journal VALUES (?, ?, ?, ?)",
}
PG_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS inbox (id text PRIMARY KEY, session_id text NOT NULL, body bytea NOT NULL,"
    " staged_at double precision NOT NULL)",
    "CREATE TABLE IF NOT EXISTS journal (session_id text NOT NULL, seq bigint NOT NULL, kind text NOT NULL,"
    " body bytea NOT NULL, PRIMARY KEY (session_id, seq))",
)
PG_INSERT = {  # each column one array parameter; ``{n}`` numbers them within the joined statement
    "inbox": "INSERT INTO inbox SELECT * FROM unnest(${0}::text[], ${1}::text[], ${2}::bytea[], ${3}::float8[])"
    " ON CONFLICT DO NOTHING",
    "journal": "INSERT INTO journal SELECT * FROM unnest(${0}::text[], ${1}::bigint[], ${2}::text[], ${3}::bytea[])",
}


class FloorStore(Protocol):
    """What the floor and its engine need of a store."""

    group: GroupCommit  # ``group.transactions``: groups committed

    async def write(self, write: Write) -> None: ...

    async def max_seq(self, session_id: str) -> int: ...

    async def journal_bodies(self, session_id: str, from_seq: int) -> list[bytes]: ...

    async def close(self) -> None: ...


def open_sqlite(path: Path, synchronous: str) -> sqlite3.Connection:
    """A connection with the pragmas turnstile's SQLite engine sets (core/store/db.py), the tables created."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA wal_autocheckpoint=0")  # checkpointed in a thread of its own (WalCheckpoints)
    for stmt in SQLITE_SCHEMA:
        conn.execute(stmt)
    return conn


class GroupCommit:
    """Every write queued while the previous group committed goes into the next one, committed by ``commit``."""

    def __init__(self, commit: Callable[[list[Write]], Awaitable[None]]) -> None:
        self._commit = commit
        self._queue: asyncio.Queue[tuple[Write, asyncio.Future[None]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.transactions = 0

    async def write(self, write: Write) -> None:
        """Returns once ``write`` is committed; raises what its group's commit raised."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((write, done))
        await done

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._commit([w for w, _ in batch])
            except Exception as exc:
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                continue
            self.transactions += 1
            for _, done in batch:
                if not done.done():
                    done.set_result(None)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


class SqliteStore:
    """The floor's SQLite file: one writer connection (group commit) and one reader."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.group = GroupCommit(self._commit)
        self.write = self.group.write
        self._conn = open_sqlite(path, synchronous)
        self._reader = open_sqlite(path, synchronous)
        self._thread = None if synchronous == "NORMAL" else ThreadPoolExecutor(1, thread_name_prefix="floor-writer")
        self._wal = WalCheckpoints(str(path))  # as turnstile's committer

    def _transaction(self, writes: list[Write]) -> None:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            for table, rows in writes:
                self._conn.executemany(SQLITE_INSERT[table], rows)
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    async def _commit(self, writes: list[Write]) -> None:
        if self._thread is None:
            self._transaction(writes)
        else:
            await asyncio.get_running_loop().run_in_executor(self._thread, self._transaction, writes)
        self._wal.committed(asyncio.get_running_loop(), sum(len(rows) for _, rows in writes))

    async def max_seq(self, session_id: str) -> int:
        row = self._reader.execute("SELECT max(seq) FROM journal WHERE session_id = ?", (session_id,)).fetchone()
        return int(row[0] or 0)

    async def journal_bodies(self, session_id: str, from_seq: int) -> list[bytes]:
        rows = self._reader.execute(
            "SELECT body FROM journal WHERE session_id = ? AND seq >= ? ORDER BY seq", (session_id, from_seq)
        )
        return [body for (body,) in rows]

    async def close(self) -> None:
        self.group.stop()
        if self._thread is not None:
            self._thread.shutdown(wait=False)


def pg_statement(writes: list[Write]) -> tuple[str, list[list[Any]]]:
    """One statement inserting every row of ``writes`` (one CTE per table present) and its array arguments."""
    by_table: dict[str, list[tuple[Any, ...]]] = {}
    for table, rows in writes:
        by_table.setdefault(table, []).extend(rows)
    parts: list[str] = []
    args: list[list[Any]] = []
    for table in TABLES:
        rows = by_table.get(table)
        if not rows:
            continue
        first = len(args) + 1
        parts.append(f"w{len(parts)} AS ({PG_INSERT[table].format(first, first + 1, first + 2, first + 3)})")
        args.extend([list(column) for column in zip(*rows, strict=True)])
    return f"WITH {', '.join(parts)} SELECT 1", args


class PgStore:
    """The floor's PostgreSQL database: one writer connection (a group is one autocommit statement) and a read pool."""

    def __init__(self, writer: asyncpg.Connection, readers: asyncpg.Pool) -> None:
        self.group = GroupCommit(self._commit)
        self.write = self.group.write
        self._writer = writer
        self._readers = readers

    @classmethod
    async def open(cls, url: str) -> PgStore:
        writer = await asyncpg.connect(url, timeout=10)
        for stmt in PG_SCHEMA:
            await writer.execute(stmt)
        readers = await asyncpg.create_pool(url, min_size=1, max_size=4, timeout=10)
        return cls(writer, readers)

    async def _commit(self, writes: list[Write]) -> None:
        sql, args = pg_statement(writes)
        await self._writer.execute(sql, *args)

    async def max_seq(self, session_id: str) -> int:
        value = await self._readers.fetchval("SELECT max(seq) FROM journal WHERE session_id = $1", session_id)
        return int(value or 0)

    async def journal_bodies(self, session_id: str, from_seq: int) -> list[bytes]:
        rows = await self._readers.fetch(
            "SELECT body FROM journal WHERE session_id = $1 AND seq >= $2 ORDER BY seq", session_id, from_seq
        )
        return [bytes(row["body"]) for row in rows]

    async def close(self) -> None:
        self.group.stop()
        await self._readers.close()
        await self._writer.close()
