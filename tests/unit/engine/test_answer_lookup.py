"""KS-14 beyond the state's recent events: answers are looked up in the journal."""

from __future__ import annotations

import pytest

from core.engine import Session
from core.engine.state import MAX_EXTERNAL_EVENTS
from tests.fakes.journal import InMemoryJournal

from .conftest import Recorder, SessionFactory


@pytest.mark.rule("KS-14")
async def test_an_event_answered_before_the_recent_ones_is_found_in_the_journal(
    make_session: SessionFactory, journal: InMemoryJournal
) -> None:
    # KS-14
    session = await make_session()
    turns: dict[str, str] = {}
    for i in range(MAX_EXTERNAL_EVENTS + 4):
        event_id = f"ev-{i}"
        await session.begin_user_turn(f"message {i}", {"external_event_id": event_id, "inbound_id": f"in-{i}"})
        await session.run_pending_turn(f"op-{i}", Recorder())
        turns[event_id] = str(session.turn_id)
    assert session.answer_for_external_event("ev-0") is None  # the state keeps the recent events only
    old = await session.lookup_external_event("ev-0")
    assert old.answer is not None and old.answer["text"] == "echo: message 0"
    assert old.turn_id == turns["ev-0"] and old.answering_inbound_id == "in-0"
    assert [r["text"] for r in old.replies] == ["echo: message 0"]
    recent = await session.lookup_external_event(f"ev-{MAX_EXTERNAL_EVENTS + 3}")
    assert recent.answer == session.answer_for_external_event(f"ev-{MAX_EXTERNAL_EVENTS + 3}")
    never = await session.lookup_external_event("ev-never")
    assert never.answer is None and never.replies == [] and never.turn_id is None


@pytest.mark.rule("KS-14")
async def test_a_young_session_answers_from_its_state_without_reading_the_journal(
    make_session: SessionFactory, journal: InMemoryJournal
) -> None:
    # KS-14: nothing was ever evicted from the state, so it is authoritative (no journal read per message).
    session = await make_session()
    text = '/tool reply {"text": "first"}\n/say second'
    await session.begin_user_turn(text, {"external_event_id": "ev-1", "inbound_id": "in-1"})
    await session.run_pending_turn("op", Recorder())
    reads: list[str] = []
    original = journal.entries_for_event

    async def counting(*args: object, **kwargs: object) -> object:
        reads.append("read")
        return await original(*args, **kwargs)  # type: ignore[arg-type]

    journal.entries_for_event = counting
    assert (await session.lookup_external_event("ev-other")).answer is None
    answered = await session.lookup_external_event("ev-1")
    assert [r["text"] for r in answered.replies] == ["first", "second"]
    assert reads == []


@pytest.mark.rule("KS-14")
async def test_a_long_session_reads_its_responded_events_once_and_keeps_them_current(
    make_session: SessionFactory, journal: InMemoryJournal
) -> None:
    # KS-14: the first event the state does not know is looked up by itself (one indexed read: a reopened
    # long session pays no read of its whole history for its next message); from the second on, the
    # session's responded events are read once, so new events cost no journal read per message; events
    # answered after that read are still found once the state has dropped them.
    session = await make_session()
    await _answer_events(session, range(MAX_EXTERNAL_EVENTS + 2))
    reads = _count_reads(journal)
    assert (await session.lookup_external_event("ev-new-1")).answer is None
    assert reads == ["entries_for_event"]
    assert (await session.lookup_external_event("ev-new-2")).answer is None
    assert (await session.lookup_external_event("ev-new-3")).answer is None
    assert reads == ["entries_for_event", "event_ids"]
    later = MAX_EXTERNAL_EVENTS + 2
    await _answer_events(session, range(later, later + MAX_EXTERNAL_EVENTS + 1))  # ev-<later> leaves the state again
    assert session.answer_for_external_event(f"ev-{later}") is None
    found = await session.lookup_external_event(f"ev-{later}")
    assert found.answer is not None and found.answer["text"] == f"echo: message {later}"
    assert reads == ["entries_for_event", "event_ids", "entries_for_event"]


@pytest.mark.rule("KS-14")
async def test_the_first_unknown_event_after_a_load_is_one_indexed_read_answered_or_not(
    make_session: SessionFactory, journal: InMemoryJournal
) -> None:
    # KS-14: an old answered event (a replay) and a new one each cost the reopened session one read of
    # that event's entries, never the list of every event it answered; unanswered entries of an event
    # (its user message alone) are no answer.
    session = await make_session()
    await _answer_events(session, range(MAX_EXTERNAL_EVENTS + 2))
    await session.begin_user_turn("left pending", {"external_event_id": "ev-pending", "inbound_id": "in-p"})
    reads = _count_reads(journal)
    for event_id, answered in (("ev-0", True), ("ev-never", False), ("ev-pending", False)):
        reopened = await make_session()  # the same journal, a new load
        reads.clear()
        answers = await reopened.lookup_external_event(event_id)
        assert (answers.answer is not None) is answered, event_id
        assert reads == ["entries_for_event"], event_id
        if answered:
            assert answers.answer is not None and answers.answer["text"] == "echo: message 0"
            assert answers.answering_inbound_id == "in-0"
        else:
            assert answers.replies == [] and answers.turn_id is None


async def _answer_events(session: Session, numbers: range) -> None:
    """One answered turn per number n: event ``ev-<n>``, inbound ``in-<n>``, the text ``message <n>``."""
    for i in numbers:
        await session.begin_user_turn(f"message {i}", {"external_event_id": f"ev-{i}", "inbound_id": f"in-{i}"})
        await session.run_pending_turn(f"op-{i}", Recorder())


def _count_reads(journal: InMemoryJournal) -> list[str]:
    """Record, in order, each read of ``journal`` that KS-14 lookups make."""
    reads: list[str] = []
    for name in ("event_ids", "entries_for_event"):
        original = getattr(journal, name)

        async def counting(*args: object, _name: str = name, _original: object = original, **kwargs: object) -> object:
            reads.append(_name)
            return await _original(*args, **kwargs)  # type: ignore[operator]

        setattr(journal, name, counting)
    return reads
