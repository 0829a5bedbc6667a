"""SQL journal: entries of one external event, for KS-14 answer lookups (SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from core.engine import EntryKind, JournalEntry
from core.engine.answers import EVENT_KINDS, EventAnswers
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


async def test_event_ids_are_every_event_the_session_has_entries_of_whatever_their_kind(engine: AsyncEngine) -> None:
    # A superset of the events it answered (a KS-14 lookup checks a member's entries); older
    # generations not cleared yet may be in it, other sessions' events are not.
    journal = SqlHistoryJournal(engine)
    sid = f"s-{uuid.uuid4()}"
    await journal.append(sid, [
        _entry(0, EntryKind.USER_MESSAGE, "e1", "t1", text="hi", inbound_id="in-1"),
        _entry(1, EntryKind.REPLY, "e1", "t1", text="one"),
        _entry(2, EntryKind.AGENT_MESSAGE, "e1", "t1", text="two", tool_calls=[]),
        _entry(3, EntryKind.USER_MESSAGE, "e2", "t2", text="unanswered", inbound_id="in-2"),
        _entry(4, EntryKind.NOTICE, None, "t3", text="no event"),
    ])
    await journal.append(f"o-{uuid.uuid4()}", [_entry(0, EntryKind.REPLY, "e-other", "t9", text="not mine")])
    await journal.append(sid, [_entry(0, EntryKind.REPLY, "e3", "t4", text="next generation")], generation=1)
    assert {"e1", "e2"} <= await journal.event_ids(sid) <= {"e1", "e2", "e3"}
    assert await journal.event_ids(sid, generation=1) >= {"e3"}
    assert "e-other" not in await journal.event_ids(sid)
    assert await journal.event_ids(f"none-{uuid.uuid4()}") == set()
    await journal.aclose()


async def test_sqlite_reads_an_events_entries_and_the_sessions_event_ids_on_the_loop_up_to_a_bound(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reopened session with more events than its state remembers looks up an unknown event's entries,
    # then (a second one) reads its event ids once (KS-14). On SQLite both run on the loop through the
    # read-only connection, as a tail read does, not through the async pool's thread hops (~2 ms of the
    # first message after a reopen); a session with ``EVENT_IDS_ON_LOOP`` events or more has its ids
    # read through the pool.
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
        events = {f"e{i}" for i in range(6)}
        assert [e.seq for e in await journal.entries_for_event(sid, "e3", EVENT_KINDS)] == [3]
        assert await journal.entries_for_event(sid, "e9", EVENT_KINDS) == []
        assert await journal.event_ids(sid) == events
        assert checkouts == []
        monkeypatch.setattr(journal_repo, "EVENT_IDS_ON_LOOP", 6)  # as many as it has: there may be more
        assert await journal.event_ids(sid) == events
        assert len(checkouts) == 1
        monkeypatch.setattr(journal_repo, "EVENT_IDS_ON_LOOP", 7)
        assert await journal.event_ids(sid) == events
        assert len(checkouts) == 1
    finally:
        event.remove(engine.sync_engine.pool, "checkout", checked_out)
    await journal.aclose()


async def test_sqlite_looks_up_an_event_through_its_index_whatever_the_sessions_length(engine: AsyncEngine) -> None:
    # KS-14's lookup of one event runs on the event loop (SQLite): it must read that event's rows
    # (ix_journal_entries_event), not walk the session's whole history. SQLite's planner, left to
    # itself, took the primary key (session, generation, seq) for the ORDER BY and filtered every row
    # of the session: 0.8 ms a lookup at 3,000 entries, growing with the session, on the loop. Counted
    # in SQLite virtual-machine steps (a progress handler every 100 of them) on the reader's connection.
    journal = SqlHistoryJournal(engine)
    if journal._tail_reader is None:
        pytest.skip("PostgreSQL reads through the pool (its planner takes the event index: EXPLAIN)")
    short, long = f"s-{uuid.uuid4()}", f"l-{uuid.uuid4()}"
    await journal.append(short, [_entry(i, EntryKind.USER_MESSAGE, f"e{i}", f"t{i}", text="x") for i in range(20)])
    for start in range(0, 3000, 500):
        await journal.append(long, [
            _entry(i, EntryKind.USER_MESSAGE, f"e{i}", f"t{i}", text="x") for i in range(start, start + 500)
        ])
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    with journal._tail_reader.connect() as conn:
        conn.connection.driver_connection.set_progress_handler(step, 100)  # type: ignore[union-attr]
    try:
        counted: dict[str, int] = {}
        for sid in (short, long):
            steps[0] = 0
            assert [e.seq for e in await journal.entries_for_event(sid, "e7", EVENT_KINDS)] == [7]
            assert await journal.entries_for_event(sid, "e-none", EVENT_KINDS) == []
            counted[sid] = steps[0]
        assert counted[long] <= counted[short] + 2, counted
    finally:
        with journal._tail_reader.connect() as conn:
            conn.connection.driver_connection.set_progress_handler(None, 100)  # type: ignore[union-attr]
    await journal.aclose()
