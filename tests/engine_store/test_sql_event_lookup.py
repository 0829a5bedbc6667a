"""SQL journal: entries of one external event, for KS-14 answer lookups (SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from core.engine import EntryKind, JournalEntry
from core.engine.answers import EVENT_KINDS, RESPONSE_KINDS, EventAnswers
from core.store import journal_repo
from core.store.journal_repo import SqlHistoryJournal

AT = "2025-01-01T00:00:00+00:00"


def _entry(seq: int, kind: EntryKind, event_id: str | None, turn_id: str, **payload: object) -> JournalEntry:
    return JournalEntry(seq=seq, kind=kind, turn_id=turn_id, external_event_id=event_id, at=AT, payload=payload)


async def test_entries_for_event_returns_that_events_entries_of_the_asked_kinds_in_seq_order(
    engine: AsyncEngine,
) -> None:
    journal = SqlHistoryJournal(engine)
    sid, other = f"s-{uuid.uuid4()}", f"o-{uuid.uuid4()}"
    await journal.append(sid, [
        _entry(0, EntryKind.EVENT, "e1", "t1", type="turn_started"),
        _entry(1, EntryKind.USER_MESSAGE, "e1", "t1", text="hi", inbound_id="in-1"),
        _entry(2, EntryKind.REPLY, "e1", "t1", text="one"),
        _entry(3, EntryKind.AGENT_MESSAGE, "e1", "t1", text="two", tool_calls=[]),
        _entry(4, EntryKind.USER_MESSAGE, "e2", "t2", text="next", inbound_id="in-2"),
    ])
    await journal.append(other, [_entry(0, EntryKind.REPLY, "e1", "t9", text="not mine")])
    entries = await journal.entries_for_event(sid, "e1", EVENT_KINDS)
    assert [e.seq for e in entries] == [1, 2, 3]
    answers = EventAnswers.from_entries(entries)
    assert answers.turn_id == "t1" and answers.answering_inbound_id == "in-1"
    assert [(r["seq"], r["text"], r["at"]) for r in answers.replies] == [(2, "one", AT), (3, "two", AT)]
    assert await journal.entries_for_event(sid, "e3", EVENT_KINDS) == []
    await journal.aclose()


async def test_event_ids_are_the_sessions_distinct_events_of_the_asked_kinds(engine: AsyncEngine) -> None:
    journal = SqlHistoryJournal(engine)
    sid = f"s-{uuid.uuid4()}"
    await journal.append(sid, [
        _entry(0, EntryKind.USER_MESSAGE, "e1", "t1", text="hi", inbound_id="in-1"),
        _entry(1, EntryKind.REPLY, "e1", "t1", text="one"),
        _entry(2, EntryKind.AGENT_MESSAGE, "e1", "t1", text="two", tool_calls=[]),
        _entry(3, EntryKind.USER_MESSAGE, "e2", "t2", text="unanswered", inbound_id="in-2"),
        _entry(4, EntryKind.NOTICE, None, "t3", text="no event"),
    ])
    assert await journal.event_ids(sid, RESPONSE_KINDS) == {"e1"}
    assert await journal.event_ids(sid, EVENT_KINDS) == {"e1", "e2"}
    assert await journal.event_ids(f"none-{uuid.uuid4()}", EVENT_KINDS) == set()
    await journal.aclose()


async def test_sqlite_reads_a_sessions_answered_events_on_the_loop_up_to_a_bound(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reopened session with more events than its state remembers reads its answered event ids once
    # (KS-14). On SQLite that read runs on the loop through the read-only connection, as a tail read
    # does, not through the async pool's thread hops (~2 ms of the first message after a reopen);
    # a session with more answered events than ``EVENT_IDS_ON_LOOP`` is read through the pool.
    journal = SqlHistoryJournal(engine)
    if journal._tail_reader is None:
        pytest.skip("PostgreSQL reads through the pool only")
    sid = f"s-{uuid.uuid4()}"
    await journal.append(sid, [
        _entry(i, EntryKind.REPLY, f"e{i}", f"t{i}", text="answer") for i in range(5)
    ] + [_entry(5, EntryKind.USER_MESSAGE, "e5", "t5", text="unanswered", inbound_id="in-5")])
    checkouts: list[object] = []

    def checked_out(*args: object) -> None:
        checkouts.append(args)

    event.listen(engine.sync_engine.pool, "checkout", checked_out)
    try:
        answered = {f"e{i}" for i in range(5)}
        assert await journal.event_ids(sid, RESPONSE_KINDS) == answered
        assert checkouts == []
        monkeypatch.setattr(journal_repo, "EVENT_IDS_ON_LOOP", 5)  # as many as it has: there may be more
        assert await journal.event_ids(sid, RESPONSE_KINDS) == answered
        assert len(checkouts) == 1
        monkeypatch.setattr(journal_repo, "EVENT_IDS_ON_LOOP", 6)
        assert await journal.event_ids(sid, RESPONSE_KINDS) == answered
        assert len(checkouts) == 1
    finally:
        event.remove(engine.sync_engine.pool, "checkout", checked_out)
    await journal.aclose()
