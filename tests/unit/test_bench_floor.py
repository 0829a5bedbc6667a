"""The guarantee floor's SQLite side (bench/floor.py): turnstile's pragmas and group commit, on a real file."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from bench.floor import Committer, open_db


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
