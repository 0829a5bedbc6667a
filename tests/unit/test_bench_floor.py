"""The guarantee floor's SQLite side (bench/floor.py): turnstile's pragmas and group commit, on a real file."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import orjson
import pytest

from bench.floor import Committer, open_db
from bench.floor_engine import EngineTurns
from core.store.wal_checkpoints import WAL_CHECKPOINT_EVERY


def test_the_floor_opens_sqlite_with_turnstiles_pragmas(tmp_path: Path) -> None:
    conn = open_db(tmp_path / "f.db", "NORMAL")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert open_db(tmp_path / "g.db", "FULL").execute("PRAGMA synchronous").fetchone()[0] == 2


@pytest.mark.parametrize("inline", [True, False])
async def test_writes_queued_together_commit_in_one_transaction(tmp_path: Path, inline: bool) -> None:
    committer = Committer(open_db(tmp_path / "f.db", "NORMAL"), inline=inline)
    insert = "INSERT INTO journal VALUES (?, ?, ?, ?)"
    await asyncio.gather(*(committer.write((insert, [("s", i, "user", b"x")])) for i in range(10)))
    assert committer.transactions == 1
    other = sqlite3.connect(tmp_path / "f.db")
    assert other.execute("SELECT count(*) FROM journal").fetchone()[0] == 10  # committed: another connection sees it


async def test_a_failed_transaction_fails_its_writers_and_leaves_nothing(tmp_path: Path) -> None:
    committer = Committer(open_db(tmp_path / "f.db", "NORMAL"), inline=True)
    insert = "INSERT INTO journal VALUES (?, ?, ?, ?)"
    results = await asyncio.gather(
        committer.write((insert, [("s", 1, "user", b"x")])),
        committer.write((insert, [("s", 1, "user", b"duplicate")])),
        return_exceptions=True,
    )
    assert all(isinstance(r, sqlite3.IntegrityError) for r in results)
    await committer.write((insert, [("s", 2, "user", b"x")]))  # the committer goes on
    rows = sqlite3.connect(tmp_path / "f.db").execute("SELECT seq FROM journal").fetchall()
    assert rows == [(2,)]


async def test_the_floor_checkpoints_its_wal_in_a_thread_every_n_transactions_never_in_a_commit(tmp_path: Path) -> None:
    """As turnstile's committer: ``wal_autocheckpoint=0``, and a PASSIVE checkpoint once
    ``WAL_CHECKPOINT_EVERY`` transactions went by; until then the database file keeps its size."""
    db = tmp_path / "f.db"
    conn = open_db(db, "NORMAL")
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    committer = Committer(conn, inline=True)
    insert = "INSERT INTO journal VALUES (?, ?, ?, ?)"
    size = db.stat().st_size
    for i in range(WAL_CHECKPOINT_EVERY - 1):  # > 1,000 WAL pages: SQLite's default would have checkpointed
        await committer.write((insert, [("s", i, "user", b"x" * 50_000)]))
    assert db.stat().st_size == size  # every page still in the WAL
    await committer.write((insert, [("s", WAL_CHECKPOINT_EVERY, "user", b"x")]))
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
    committer = Committer(open_db(db, "NORMAL"), inline=True)
    reader = open_db(db, "NORMAL")
    observer = sqlite3.connect(db)
    published: list[tuple[int, dict[str, object]]] = []

    async def checkpoint(raw: bytes) -> None:
        committed = observer.execute("SELECT count(*) FROM journal WHERE session_id = 's1'").fetchone()[0]
        published.append((committed, orjson.loads(raw)))

    turns = EngineTurns(committer.write, reader)
    answer = await turns.turn({"session_id": "s1", "id": "m1", "text": "hello"}, checkpoint)
    assert answer == "echo: hello"
    assert len(published) == 2  # the user message staged, then the answer: one snapshot each (KS-10)
    (rows_1, snap_1), (rows_2, snap_2) = published
    assert 0 < rows_1 < rows_2  # each step's entries were committed before its snapshot went out
    assert [item["kind"] for item in snap_1["transcript"]] == ["user_message"]
    assert [item["kind"] for item in snap_2["transcript"]] == ["user_message", "agent_message"]
    assert snap_2["chatend_text"] and snap_2["projection"]  # the complete snapshot (KS-20), not a stand-in

    published.clear()
    later = EngineTurns(committer.write, open_db(db, "NORMAL"))  # another process, same file
    assert await later.turn({"session_id": "s1", "id": "m2", "text": "again"}, checkpoint) == "echo: again"
    transcript = [item["payload"]["text"] for item in published[-1][1]["transcript"]]
    assert transcript == ["hello", "echo: hello", "again", "echo: again"]
