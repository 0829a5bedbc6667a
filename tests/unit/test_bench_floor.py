"""The guarantee floor's stores (bench/floor_store.py): turnstile's SQLite pragmas and group commit on a real
file, and on a real PostgreSQL database a group committed as one statement."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import orjson
import pytest

from bench.floor_engine import EngineTurns
from bench.floor_store import PgStore, SqliteStore, open_sqlite, pg_statement
from core.store.wal_checkpoints import WAL_CHECKPOINT_EVERY


def test_the_floor_opens_sqlite_with_turnstiles_pragmas(tmp_path: Path) -> None:
    conn = open_sqlite(tmp_path / "f.db", "NORMAL")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert open_sqlite(tmp_path / "g.db", "FULL").execute("PRAGMA synchronous").fetchone()[0] == 2


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])  # on the loop; in the writer thread
async def test_writes_queued_together_commit_in_one_transaction(tmp_path: Path, synchronous: str) -> None:
    store = SqliteStore(tmp_path / "f.db", synchronous)
    await asyncio.gather(*(store.write(("journal", [("s", i, "user", b"x")])) for i in range(10)))
    assert store.group.transactions == 1
    other = sqlite3.connect(tmp_path / "f.db")
    assert other.execute("SELECT count(*) FROM journal").fetchone()[0] == 10  # committed: another connection sees it
    assert await store.max_seq("s") == 9
    await store.close()


async def test_a_failed_transaction_fails_its_writers_and_leaves_nothing(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "f.db", "NORMAL")
    results = await asyncio.gather(
        store.write(("journal", [("s", 1, "user", b"x")])),
        store.write(("journal", [("s", 1, "user", b"duplicate")])),
        return_exceptions=True,
    )
    assert all(isinstance(r, sqlite3.IntegrityError) for r in results)
    await store.write(("journal", [("s", 2, "user", b"x")]))  # the committer goes on
    rows = sqlite3.connect(tmp_path / "f.db").execute("SELECT seq FROM journal").fetchall()
    assert rows == [(2,)]


async def test_the_floor_checkpoints_its_wal_in_a_thread_every_n_transactions_never_in_a_commit(tmp_path: Path) -> None:
    """As turnstile's committer: ``wal_autocheckpoint=0``, and a PASSIVE checkpoint once
    ``WAL_CHECKPOINT_EVERY`` transactions went by; until then the database file keeps its size."""
    db = tmp_path / "f.db"
    store = SqliteStore(db, "NORMAL")
    assert open_sqlite(db, "NORMAL").execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    size = db.stat().st_size
    for i in range(WAL_CHECKPOINT_EVERY - 1):  # > 1,000 WAL pages: SQLite's default would have checkpointed
        await store.write(("journal", [("s", i, "user", b"x" * 50_000)]))
    assert db.stat().st_size == size  # every page still in the WAL
    await store.write(("journal", [("s", WAL_CHECKPOINT_EVERY, "user", b"x")]))
    deadline = asyncio.get_running_loop().time() + 10
    while db.stat().st_size < (WAL_CHECKPOINT_EVERY - 1) * 50_000:  # the checkpoint copies every row into the database file
        assert asyncio.get_running_loop().time() < deadline, "no WAL checkpoint after WAL_CHECKPOINT_EVERY transactions"
        await asyncio.sleep(0.01)


async def test_the_floor_with_the_engine_journals_each_step_before_its_complete_snapshot_and_reopens_from_it(
    tmp_path: Path,
) -> None:
    """bench/floor_engine.py: the engine's entries are committed before each checkpoint is handed over, each
    checkpoint is the whole session, and a later process (the paced phase's) continues the same sessions."""
    db = tmp_path / "f.db"
    store = SqliteStore(db, "NORMAL")
    observer = sqlite3.connect(db)
    published: list[tuple[int, dict[str, object]]] = []

    async def checkpoint(raw: bytes) -> None:
        committed = observer.execute("SELECT count(*) FROM journal WHERE session_id = 's1'").fetchone()[0]
        published.append((committed, orjson.loads(raw)))

    turns = EngineTurns(store)
    answer = await turns.turn({"session_id": "s1", "id": "m1", "text": "hello"}, checkpoint)
    assert answer == "echo: hello"
    assert len(published) == 2  # the user message staged, then the answer: one snapshot each (KS-10)
    (rows_1, snap_1), (rows_2, snap_2) = published
    assert 0 < rows_1 < rows_2  # each step's entries were committed before its snapshot went out
    assert [item["kind"] for item in snap_1["transcript"]] == ["user_message"]
    assert [item["kind"] for item in snap_2["transcript"]] == ["user_message", "agent_message"]
    assert snap_2["chatend_text"] and snap_2["projection"]  # the complete snapshot (KS-20), not a stand-in

    published.clear()
    later = EngineTurns(SqliteStore(db, "NORMAL"))  # another process, same file
    assert await later.turn({"session_id": "s1", "id": "m2", "text": "again"}, checkpoint) == "echo: again"
    transcript = [item["payload"]["text"] for item in published[-1][1]["transcript"]]
    assert transcript == ["hello", "echo: hello", "again", "echo: again"]


def test_a_postgresql_group_is_one_statement_with_one_array_per_column() -> None:
    sql, args = pg_statement([
        ("journal", [("s1", 1, "user", b"a")]),
        ("inbox", [("m1", "s1", b"{}", 1.0), ("m2", "s2", b"{}", 2.0)]),
        ("journal", [("s2", 1, "user", b"b")]),
    ])
    assert sql.count("INSERT INTO inbox") == 1 and sql.count("INSERT INTO journal") == 1
    assert sql.startswith("WITH ") and ";" not in sql  # one statement: one round trip, one commit
    assert args == [["m1", "m2"], ["s1", "s2"], [b"{}", b"{}"], [1.0, 2.0], ["s1", "s2"], [1, 1], ["user", "user"], [b"a", b"b"]]
    assert "$8::bytea[]" in sql  # the journal's columns numbered after the inbox's


@pytest.mark.postgres
async def test_the_floor_on_postgresql_commits_a_group_once_stages_a_copy_once_and_fails_a_bad_group(
    postgres_url: str,
) -> None:
    import asyncpg

    url = postgres_url.replace("postgresql+asyncpg:", "postgresql:")
    store = await PgStore.open(url)
    observer = await asyncpg.connect(url)
    try:
        await asyncio.gather(
            store.write(("inbox", [("m1", "s", b"{}", 1.0)])),
            store.write(("inbox", [("m1", "s", b"{}", 1.0)])),  # a copy sent again after a lost ack
            *(store.write(("journal", [("s", i, "user", b"x")])) for i in range(1, 6)),
        )
        assert store.group.transactions == 1  # queued together: one group, one statement
        assert await observer.fetchval("SELECT count(*) FROM inbox") == 1  # committed: another connection sees it
        assert await observer.fetchval("SELECT count(*) FROM journal") == 5
        assert await store.max_seq("s") == 5
        assert await store.journal_bodies("s", 4) == [b"x", b"x"]
        results = await asyncio.gather(
            store.write(("journal", [("s", 6, "user", b"y")])),
            store.write(("journal", [("s", 6, "user", b"duplicate")])),
            return_exceptions=True,
        )
        assert all(isinstance(r, asyncpg.UniqueViolationError) for r in results)  # the group fails as a whole
        await store.write(("journal", [("s", 7, "user", b"z")]))  # the committer goes on
        assert await observer.fetchval("SELECT array_agg(seq ORDER BY seq) FROM journal WHERE seq > 5") == [7]
    finally:
        await observer.close()
        await store.close()
