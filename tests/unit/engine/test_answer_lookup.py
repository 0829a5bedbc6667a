"""KS-14 beyond the state's recent events: answers are looked up in the journal."""

from __future__ import annotations

import pytest

from core.engine import InMemoryJournal
from core.engine.state import MAX_EXTERNAL_EVENTS

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

    journal.entries_for_event = counting  # type: ignore[method-assign]
    assert (await session.lookup_external_event("ev-other")).answer is None
    answered = await session.lookup_external_event("ev-1")
    assert [r["text"] for r in answered.replies] == ["first", "second"]
    assert reads == []
