"""A turn's answer appended to the journal with the lazy record upsert queued before it, and a message
staged with the lazy inbox marks queued before it: on PostgreSQL one statement each (no BEGIN/COMMIT),
as atomic and as failing alone as their group transaction."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import event, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

import core.store.journal_tables  # noqa: F401 - registers the journal table on the metadata
from core.engine.journal import EntryKind, JournalEntry
from core.errors import Conflict, Unavailable
from core.inbox import DONE, DROPPED, StagedMessage
from core.sessions.ports import StoreChange
from core.sessions.records import SessionRecord
from core.store.change_feed import CHANNEL, NotifyingSessionRepository
from core.store.committer import GroupCommitter
from core.store.inbox import SqlInbox
from core.store.journal_repo import SqlHistoryJournal
from core.store.session_tables import sessions_table
from tests.waiting import wait_for


def _entry(seq: int) -> JournalEntry:
    return JournalEntry(seq=seq, kind=EntryKind.NOTICE, at="2025-01-01T00:00:00+00:00", payload={"n": seq})


class Seen:
    """The statements ``engine``'s connections run between ``listen`` and ``remove`` (``before_cursor_execute``)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self.statements: list[str] = []

    def __call__(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        self.statements.append(statement)

    def listen(self) -> None:
        event.listen(self._engine.sync_engine, "before_cursor_execute", self)

    def remove(self) -> None:
        event.remove(self._engine.sync_engine, "before_cursor_execute", self)


async def _status(engine: AsyncEngine, session_id: str) -> str | None:
    async with engine.connect() as conn:
        row = (await conn.execute(select(sessions_table.c.status).where(sessions_table.c.id == session_id))).first()
    return None if row is None else str(row[0])


async def test_an_answer_and_the_lazy_record_write_before_it_commit_together_and_a_taken_seq_fails_alone(
    engine: AsyncEngine,
) -> None:
    postgres = engine.dialect.name == "postgresql"
    seen = Seen(engine)
    statements = seen.statements

    heard: list[str] = []
    listener: Any = None
    if postgres:
        import asyncpg  # type: ignore[import-untyped]

        listener = await asyncpg.connect(engine.url.set(drivername="postgresql").render_as_string(hide_password=False))
        await listener.add_listener(CHANNEL, lambda _c, _p, _ch, payload: heard.append(payload))
    committer = GroupCommitter(engine)
    journal = SqlHistoryJournal(engine, committer=committer)
    repository = NotifyingSessionRepository(engine, committer, origin="test")
    sid = f"s-{uuid.uuid4().hex[:10]}"
    record = SessionRecord(id=sid, created_at=1.0, updated_at=2.0, status="running")
    await repository.apply(StoreChange(sessions=(record,)))
    await journal.append(sid, [_entry(0)])
    seen.listen()
    try:
        # The turn_started upsert waits for company (lazy); the answer's append joins its batch.
        await asyncio.gather(
            repository.apply(StoreChange(sessions=(replace(record, status="waiting"),)), lazy=True),
            journal.append(sid, [_entry(1), _entry(2)]),
        )
        writes = list(statements)
        assert [e.seq for e in await journal.load(sid)] == [0, 1, 2]
        assert await _status(engine, sid) == "waiting"
        if postgres:
            # ONE statement: the two journal rows, the upsert and its notification (no BEGIN/COMMIT).
            assert len(writes) == 1 and writes[0].startswith("WITH ")
            assert "journal_entries" in writes[0] and "pg_notify" in writes[0]
            await wait_for(lambda: heard, what="the record's notification")
            assert sid in heard[-1]

        # A taken seq fails the joined statement: the append raises Conflict, nothing of it is written,
        # and the record write queued with it is retried alone and lands (and notifies).
        heard.clear()
        statements.clear()
        written, refused = await asyncio.gather(
            repository.apply(StoreChange(sessions=(replace(record, status="idle"),)), lazy=True),
            journal.append(sid, [_entry(3), _entry(2)]), return_exceptions=True,
        )
        assert written is None and isinstance(refused, Conflict)
        assert [e.seq for e in await journal.load(sid)] == [0, 1, 2]
        assert await _status(engine, sid) == "idle"
        if postgres:
            assert statements[0].startswith("WITH ")  # it was tried joined first
            await wait_for(lambda: heard, what="the retried record's notification")
    finally:
        seen.remove()
        await committer.aclose()
        if listener is not None:
            await listener.close()



async def test_a_lone_append_sent_as_its_piece_is_seen_counted_and_fails_as_sqlalchemys_errors(
    engine: AsyncEngine,
) -> None:
    # On PostgreSQL a lone unfenced append is sent on the writer's asyncpg connection itself, not through
    # SQLAlchemy: listeners still see it, a taken seq is still a Conflict (IntegrityError), and a connection
    # the server dropped is still Unavailable (a DBAPIError), with the next append on a new connection.
    postgres = engine.dialect.name == "postgresql"
    seen = Seen(engine)
    statements = seen.statements

    committer = GroupCommitter(engine)
    journal = SqlHistoryJournal(engine, committer=committer)
    sid = f"s-{uuid.uuid4().hex[:10]}"
    seen.listen()
    try:
        await journal.append(sid, [_entry(0)])
        if postgres:  # (SQLite's writer has an engine of its own)
            assert len(statements) == 1 and statements[0].startswith("WITH ") and "journal_entries" in statements[0]
        with pytest.raises(Conflict):
            await journal.append(sid, [_entry(1), _entry(0)])
        await journal.append(sid, [_entry(1)])
        assert [e.seq for e in await journal.load(sid)] == [0, 1]
        if postgres:
            held = committer._held
            assert held is not None
            pid = (await held.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one()
            async with engine.connect() as other:
                await other.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            with pytest.raises(Unavailable):
                await journal.append(sid, [_entry(2)])
        await journal.append(sid, [_entry(2)])
        assert [e.seq for e in await journal.load(sid)] == [0, 1, 2]
    finally:
        seen.remove()
        await committer.aclose()


def _message(mid: str) -> StagedMessage:
    return StagedMessage(platform="cli", message_id=mid, session_id="s1", generation=0, payload=b"{}")


async def test_a_staged_message_and_the_lazy_marks_queued_before_it_commit_together(engine: AsyncEngine) -> None:
    """The previous messages' done marks wait for company (lazy) and ride on the next staging: on
    PostgreSQL as ONE statement, which still answers which messages were new."""
    postgres = engine.dialect.name == "postgresql"
    seen = Seen(engine)
    statements = seen.statements

    committer = GroupCommitter(engine)
    inbox = SqlInbox(engine, committer)
    first, other, second = _message("m1"), _message("m0"), _message("m2")
    assert await inbox.stage([other, first]) == [True, True]
    seen.listen()
    try:
        inbox.mark(other, DROPPED)
        inbox.mark(first, DONE)
        # The background flush's write is queued first (lazy), the staging joins its batch.
        _, staged = await asyncio.gather(inbox._flush_lazily(), inbox.stage([second]))
        writes = list(statements)
        assert staged == [True]
        if postgres:
            # ONE statement: the marks' update and the staging insert (no BEGIN/COMMIT).
            assert len(writes) == 1 and writes[0].startswith("WITH ")
            assert "UPDATE inbox" in writes[0] and "INSERT INTO inbox" in writes[0]

        statements.clear()
        inbox.mark(second, DONE)
        _, again = await asyncio.gather(inbox._flush_lazily(), inbox.stage([second]))  # a redelivery
        assert again == [False]  # staged before: not new
        if postgres:
            assert len(statements) == 1 and statements[0].startswith("WITH ")
    finally:
        seen.remove()
        await committer.aclose()
    assert [await inbox.status_of("cli", m) for m in ("m0", "m1", "m2")] == [DROPPED, DONE, DONE]


async def test_a_journal_read_on_a_connection_the_server_dropped_is_unavailable_and_never_pooled_again(
    engine: AsyncEngine,
) -> None:
    # On PostgreSQL a reopen's journal reads are fetched on the pooled connection's asyncpg connection itself,
    # past SQLAlchemy: a read that meets a connection the server dropped raises Unavailable and invalidates
    # it, so each dead connection fails one read at most (handed out again, it would fail every read).
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's pooled reads (SQLite reads the journal on the loop)")
    import asyncpg

    committer = GroupCommitter(engine)
    journal = SqlHistoryJournal(engine, committer=committer)
    sid = f"s-{uuid.uuid4().hex[:10]}"
    try:
        await journal.append(sid, [_entry(0), _entry(1)])
        assert [e.seq for e in await journal.load(sid)] == [0, 1]
        assert [e.seq for e in (await journal.newest(sid)).entries_from(1) or []] == [1]
        await committer.aclose()  # its kept connection back in the pool too
        idle = engine.pool.checkedin()  # type: ignore[attr-defined]
        assert idle >= 1
        killer = await asyncpg.connect(engine.url.set(drivername="postgresql").render_as_string(hide_password=False))
        try:
            killed = await killer.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await killer.close()
        assert killed >= idle
        failed = 0
        for _ in range(idle + 3):
            try:
                assert [e.seq for e in await journal.load(sid, from_seq=1)] == [1]
            except Unavailable:
                failed += 1
        assert 1 <= failed <= idle  # every dead one failed once at most; the last reads all got live ones
        assert [e.seq for e in await journal.load(sid)] == [0, 1]
    finally:
        await committer.aclose()
