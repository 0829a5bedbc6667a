"""Group commit: writes of many callers share transactions; a cancelled caller's write still lands."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import Connection, event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from core.store.committer import GroupCommitter


async def _count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM committer_probe"))).scalar_one())


@pytest.fixture
async def probe(engine: AsyncEngine) -> AsyncIterator[None]:
    """The table ``committer_probe (n)``, empty, dropped after the test."""
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE IF NOT EXISTS committer_probe (n INTEGER PRIMARY KEY)"))
        await conn.execute(text("DELETE FROM committer_probe"))
    yield
    async with engine.begin() as conn:
        await conn.execute(text("DROP TABLE committer_probe"))


async def test_grouped_writes_land_each_failure_stays_its_own_and_a_cancelled_caller_still_writes(
    engine: AsyncEngine, probe: None,
) -> None:
    # MQ-8: staging is durable when the caller's write returns; one bad write in a group does not
    # fail its neighbours; cancelling a caller (a stopped turn) does not undo its queued write.
    committer = GroupCommitter(engine)

    def insert(n: int):  # type: ignore[no-untyped-def]
        def op(conn: Connection) -> int:
            conn.execute(text("INSERT INTO committer_probe (n) VALUES (:n)"), {"n": n})
            return n

        return op

    try:
        results = await asyncio.gather(
            *(committer.run(insert(n)) for n in (1, 2, 2, 3)), return_exceptions=True
        )
        assert results[0] == 1 and results[1] == 2 and results[3] == 3
        assert isinstance(results[2], Exception)  # the duplicate failed alone
        cancelled = asyncio.ensure_future(committer.run(insert(4)))
        await asyncio.sleep(0)  # queued
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await committer.run(insert(5))  # a later write commits after the cancelled one's group
        assert await _count(engine) == 5
    finally:
        await committer.aclose()


async def test_sqlite_writes_wait_for_a_held_write_lock_off_the_event_loop(engine: AsyncEngine, probe: None) -> None:
    # MQ-8: a group transaction runs on the loop only when SQLite's write lock is free; when
    # another connection holds it, the write waits in the committer's thread and still lands,
    # and the event loop keeps running meanwhile.
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite's write lock")
    import sqlite3

    committer = GroupCommitter(engine)

    def insert(conn: Connection) -> None:
        conn.execute(text("INSERT INTO committer_probe (n) VALUES (7)"))

    holder = sqlite3.connect(str(engine.url.database), isolation_level=None, check_same_thread=False)
    try:
        await committer.run(lambda conn: None)  # the writer's connection is open
        holder.execute("BEGIN IMMEDIATE")
        write = asyncio.ensure_future(committer.run(insert))
        ticks = 0
        while committer.waited == 0:  # the loop runs while the write waits for the lock
            ticks += 1
            await asyncio.sleep(0.01)
            assert ticks < 500, "the write never noticed the held lock"
        assert not write.done()
        holder.execute("COMMIT")
        await asyncio.wait_for(write, 10)
        assert await _count(engine) == 1
    finally:
        holder.close()
        await committer.aclose()


async def test_a_sqlite_write_waiting_for_the_lock_does_not_wait_for_a_wal_checkpoint_under_way(
    engine: AsyncEngine, probe: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MQ-8: a write that finds the lock held waits in the writer's thread; a background WAL
    # checkpoint (its fsync of the database file can take tens of ms) must not stand in front of
    # it there: the write lands as soon as the lock is free, the checkpoint still under way.
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite's write lock and WAL")
    import sqlite3
    import threading

    import core.store.wal_checkpoints as wal_module
    from core.store.wal_checkpoints import WalCheckpoints

    monkeypatch.setattr(wal_module, "WAL_CHECKPOINT_EVERY", 1)  # every transaction starts one
    checkpoint_started, checkpoint_may_end = threading.Event(), threading.Event()

    def slow_checkpoint(self: WalCheckpoints) -> None:
        checkpoint_started.set()
        checkpoint_may_end.wait(30)

    monkeypatch.setattr(WalCheckpoints, "_checkpoint", slow_checkpoint)
    committer = GroupCommitter(engine)

    def insert(conn: Connection) -> None:
        conn.execute(text("INSERT INTO committer_probe (n) VALUES (7)"))

    holder = sqlite3.connect(str(engine.url.database), isolation_level=None, check_same_thread=False)
    try:
        await committer.run(lambda conn: None)  # commits, then starts a checkpoint that does not end
        assert await asyncio.to_thread(checkpoint_started.wait, 10)
        holder.execute("BEGIN IMMEDIATE")
        write = asyncio.ensure_future(committer.run(insert))
        ticks = 0
        while committer.waited == 0:  # the write found the lock held: it waits in the thread
            ticks += 1
            await asyncio.sleep(0.01)
            assert ticks < 500, "the write never noticed the held lock"
        holder.execute("COMMIT")
        await asyncio.wait_for(write, 10)  # landed while the checkpoint is still under way
        assert not checkpoint_may_end.is_set()
        assert await _count(engine) == 1
    finally:
        checkpoint_may_end.set()
        holder.close()
        await committer.aclose()


async def test_sqlite_wal_is_checkpointed_in_the_background_and_stays_small(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MQ-8: commits never checkpoint the WAL on the event loop; a background checkpoint does,
    # so the WAL is reused instead of growing with every write.
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite's WAL")
    import os

    import core.store.wal_checkpoints as wal_module

    monkeypatch.setattr(wal_module, "WAL_CHECKPOINT_EVERY", 20)
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE IF NOT EXISTS committer_blobs (n INTEGER PRIMARY KEY, b BLOB)"))
    committer = GroupCommitter(engine)
    wal = f"{engine.url.database}-wal"
    blob = os.urandom(8192)
    try:
        for n in range(600):
            await committer.run(
                lambda conn, n=n: conn.execute(text("INSERT INTO committer_blobs (n, b) VALUES (:n, :b)"), {"n": n, "b": blob})
            )
            checkpoints = committer._wal
            if checkpoints is not None and checkpoints.running is not None:
                await checkpoints.running  # let each background checkpoint finish (deterministic)
        assert committer.transactions >= 600
        # 600 writes of 8 KB would leave a WAL of ~5 MB without checkpoints.
        assert os.path.getsize(wal) < 1_000_000  # noqa: ASYNC240 (a stat of the test's own WAL file)
    finally:
        await committer.aclose()
        async with engine.begin() as conn:
            await conn.execute(text("DROP TABLE committer_blobs"))


async def test_sqlite_synchronous_full_is_applied_to_every_connection_and_commits_in_the_thread(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # MQ-8: TURNSTILE_SQLITE_SYNCHRONOUS=FULL makes every SQLite commit survive an OS crash;
    # those fsyncing commits run in the committer's thread, never on the event loop.
    from core.store.db import create_db_engine

    engine = create_db_engine(f"sqlite+aiosqlite:///{tmp_path}/full.db", sqlite_synchronous="FULL")
    committer = GroupCommitter(engine, sqlite_synchronous="FULL")
    threads: list[str] = []

    def probe(conn: Connection) -> int:
        import threading

        threads.append(threading.current_thread().name)
        return int(conn.exec_driver_sql("PRAGMA synchronous").scalar_one())

    try:
        assert await committer.run(probe) == 2  # FULL
        assert threads and threads[0].startswith("sqlite-writer")
        async with engine.connect() as conn:
            assert (await conn.exec_driver_sql("PRAGMA synchronous")).scalar_one() == 2
    finally:
        await committer.aclose()
        await engine.dispose()
    with pytest.raises(ValueError):
        create_db_engine(f"sqlite+aiosqlite:///{tmp_path}/bad.db", sqlite_synchronous="OFF")


async def test_a_lazy_write_shares_the_next_waited_for_transaction_in_queue_order(
    engine: AsyncEngine, probe: None,
) -> None:
    # Turn bookkeeping and inbox marks (lazy) ride on the next write someone waits for instead
    # of committing alone; the order of the queue is kept inside the shared transaction, so a
    # later write (here: a deletion) is never overtaken by a lazy write queued before it.
    committer = GroupCommitter(engine, lazy_wait_s=60.0)

    def insert(n: int):  # type: ignore[no-untyped-def]
        return lambda conn: conn.execute(text("INSERT INTO committer_probe (n) VALUES (:n)"), {"n": n})

    def delete(n: int):  # type: ignore[no-untyped-def]
        return lambda conn: conn.execute(text("DELETE FROM committer_probe WHERE n = :n"), {"n": n})

    try:
        await committer.run(insert(0))  # the writer is up and idle
        before = committer.transactions
        lazy = asyncio.ensure_future(committer.run(insert(1), lazy=True))
        for _ in range(20):  # the writer takes it and waits for company (it has 60 s)
            await asyncio.sleep(0)
        assert not lazy.done()
        await committer.run(delete(1))  # waited for: commits now, after the lazy insert
        assert lazy.done()
        assert committer.transactions == before + 1  # one transaction for both
        assert await _count(engine) == 1  # the deletion was not overtaken

        alone = asyncio.ensure_future(committer.run(insert(2), lazy=True))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not alone.done()
        committer.hurry()  # someone waits for it: no more waiting for company
        await asyncio.wait_for(alone, 10)
        assert await _count(engine) == 2
    finally:
        await committer.aclose()


async def test_a_lazy_write_without_company_commits_after_its_wait_and_at_close(
    engine: AsyncEngine, probe: None,
) -> None:
    quick = GroupCommitter(engine, lazy_wait_s=0.01)
    patient = GroupCommitter(engine, lazy_wait_s=60.0)
    try:
        op = lambda n: lambda conn: conn.execute(text("INSERT INTO committer_probe (n) VALUES (:n)"), {"n": n})  # noqa: E731
        await asyncio.wait_for(quick.run(op(1), lazy=True), 10)  # alone: once its wait is over
        pending = asyncio.ensure_future(patient.run(op(2), lazy=True))
        for _ in range(20):
            await asyncio.sleep(0)
        await asyncio.wait_for(patient.aclose(), 10)  # shutdown writes what waits for company
        await asyncio.wait_for(pending, 10)
        assert await _count(engine) == 2
    finally:
        await quick.aclose()
        await patient.aclose()


async def test_a_lone_one_statement_write_is_committed_when_run_returns_and_fails_alone(
    engine: AsyncEngine, probe: None,
) -> None:
    # MQ-8: a write of one statement alone in its batch (PostgreSQL: run in autocommit, no BEGIN/COMMIT
    # round trips) is as durable on return as a group transaction, and a failing one raises and
    # writes nothing; queued together with other writes it shares their transaction as before.
    committer = GroupCommitter(engine)

    def insert(*ns: int):  # type: ignore[no-untyped-def]
        def op(conn: Connection) -> int:
            conn.execute(text("INSERT INTO committer_probe (n) VALUES (:n)"), [{"n": n} for n in ns])
            return len(ns)

        return op

    try:
        assert await committer.run(insert(1), one_statement=True) == 1
        assert await _count(engine) == 1  # seen by another connection: committed
        with pytest.raises(Exception):  # noqa: B017 - the driver's unique violation, whatever its class
            await committer.run(insert(1), one_statement=True)
        assert await _count(engine) == 1
        results = await asyncio.gather(
            committer.run(insert(2), one_statement=True), committer.run(insert(3, 4)),
            committer.run(insert(2), one_statement=True), return_exceptions=True,
        )
        assert results[0] == 1 and results[1] == 2 and isinstance(results[2], Exception)
        assert await _count(engine) == 4
    finally:
        await committer.aclose()


async def test_postgresql_statements_share_one_kept_connection_and_a_dropped_one_is_replaced(
    engine: AsyncEngine, probe: None,
) -> None:
    # The writer's autocommit statements run on one connection it keeps (no pool checkout each); when
    # the server drops that connection, the write under way raises and lands nowhere, and the next one
    # runs on a new connection and lands.
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's autocommit statements")
    committer = GroupCommitter(engine)

    def insert(n: int):  # type: ignore[no-untyped-def]
        def op(conn: Connection) -> int:
            return int(conn.execute(
                text("INSERT INTO committer_probe (n) VALUES (:n) RETURNING pg_backend_pid()"), {"n": n}
            ).scalar_one())

        return op

    checkouts: list[object] = []
    event.listen(engine.sync_engine, "checkout", lambda *_: checkouts.append(None))
    try:
        pids = [await committer.run(insert(n), one_statement=True) for n in (1, 2, 3)]
        assert len(set(pids)) == 1 and len(checkouts) == 1, (pids, checkouts)  # one kept connection
        assert await _count(engine) == 3  # each committed when its run returned
        async with engine.connect() as other:
            assert (await other.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pids[0]})).scalar_one()
        with pytest.raises(Exception):  # noqa: B017 - the driver's "connection closed", whatever its class
            await committer.run(insert(4), one_statement=True)
        assert await committer.run(insert(5), one_statement=True) != pids[0]
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT n FROM committer_probe ORDER BY n"))).scalars().all()
        assert rows == [1, 2, 3, 5]
    finally:
        await committer.aclose()
