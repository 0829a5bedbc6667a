"""The guarantee floor's SQLite side (bench/floor.py): turnstile's pragmas and group commit, on a real file."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from bench.floor import Committer, open_db
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
