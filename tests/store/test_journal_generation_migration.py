"""The journal-generation migration keeps existing history as generation 0, on SQLite and PostgreSQL."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from core.engine import EntryKind, JournalEntry
from core.store.db import create_db_engine
from core.store.journal_repo import SqlHistoryJournal
from core.store.migrate import alembic_config

BEFORE = "46af92d84265"


def _upgrade(conn: Connection, revision: str) -> None:
    command.upgrade(alembic_config(conn), revision)


async def test_existing_rows_become_generation_zero_and_generations_have_their_own_seqs(db_url: str) -> None:
    engine = create_db_engine(db_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade, BEFORE)
            await conn.execute(text(
                "INSERT INTO journal_entries (session_id, seq, kind, at, payload) "
                "VALUES ('s', 0, 'notice', '2025-01-01T00:00:00+00:00', '{\"text\": \"kept\"}')"
            ))
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade, "head")
            pk = await conn.run_sync(lambda c: inspect(c).get_pk_constraint("journal_entries"))
        assert pk["constrained_columns"] == ["session_id", "generation", "seq"]
        journal = SqlHistoryJournal(engine)
        assert [e.payload for e in await journal.load("s", generation=0)] == [{"text": "kept"}]
        entry = JournalEntry(seq=0, kind=EntryKind.NOTICE, at="2025-01-01T00:00:00+00:00")
        await journal.append("s", [entry], generation=1)  # seq 0 again, of the next generation
        assert len(await journal.load("s", generation=1)) == 1
        await journal.aclose()
    finally:
        await engine.dispose()
