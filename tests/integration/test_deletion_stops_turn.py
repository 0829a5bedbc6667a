"""SM-21: deletion stops the running turn, waits for it, and the next session under the id starts empty."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from consumers.service import TurnstileService
from consumers.settings import Settings
from core.engine import EntryKind, JournalEntry
from core.store.db import create_db_engine
from core.store.journal_repo import SqlHistoryJournal
from core.store.migrate import migrate
from schemas.subjects import Subjects
from tests.integration.blocking_journal import HeldJournal
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for


def _sid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _of(events: Collector, event_type: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events.json() if e["type"] == event_type]


async def _stored_turn_ended(service: TurnstileService, subjects: Subjects, sid: str) -> dict[str, Any] | None:
    assert service.js is not None
    try:
        msg = await service.js.get_last_msg(subjects.events_stream, subjects.event(sid, "turn.ended"))
    except NotFoundError:
        return None
    data: dict[str, Any] = orjson.loads(msg.data)["data"]
    return data


async def _new_session_starts_empty(
    service: TurnstileService, nc: Client, subjects: Subjects, sid: str, old_text: str
) -> None:
    """A message after the deletion is answered by a session that knows nothing of before."""
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    after = inbound(sid, "after the deletion")
    await publish_inbound(nc, subjects, after)
    await wait_for(lambda: replies.messages, what="the reply of the new session")
    assert [r["text"] for r in replies.json()] == ["echo: after the deletion"]
    await wait_for(
        lambda: checkpoints.messages and checkpoints.json()[-1]["transition"] == "turn_ended", what="its last checkpoint"
    )
    snapshot = checkpoints.json()[-1]["snapshot"]
    assert old_text not in orjson.dumps(snapshot).decode()
    assert "after the deletion" in snapshot["chatend_text"]
    assert service.engines is not None
    generation = service.manager.generation_of(sid)
    history = await service.engines.journal.load(sid, generation=generation)
    assert history and all(old_text not in orjson.dumps(e.payload).decode() for e in history)


@pytest.mark.rule("SM-21", "SM-22", "MQ-5")
async def test_deleting_a_session_stops_its_stalled_turn_before_the_clear(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = _sid("stall")
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    stalled = inbound(sid, "/stall 60\nstalled words")
    await publish_inbound(nc, subjects, stalled)
    await wait_for(lambda: _of(events, "turn.started"), what="the stalled turn")
    old_generation = service.manager.generation_of(sid)

    assert service.engines is not None and service.actors is not None
    engines, actors = service.engines, service.actors
    at_clear: dict[str, Any] = {}
    real_clear = engines.clear_older

    async def observed_clear(generations: Sequence[tuple[str, int]]) -> None:
        # The history clear begins: the turn has stopped and its turn.ended is stored already.
        [(session_id, _)] = generations
        actor = actors.get(session_id)
        at_clear["busy"] = actor is not None and actor.busy
        at_clear["turn_ended"] = await _stored_turn_ended(service, subjects, session_id)
        await real_clear(generations)

    engines.clear_older = observed_clear  # type: ignore[method-assign]
    deleted = await api(nc, subjects, "session", "delete", {"session_id": sid})
    assert deleted["ok"], deleted

    assert at_clear["busy"] is False
    ended = at_clear["turn_ended"]
    assert ended is not None and ended["outcome"] == "aborted" and ended["generation"] == old_generation
    # Stopped, not answered: no reply, one turn.ended, of the old generation.
    await wait_for(lambda: _of(events, "turn.ended"), what="turn.ended on the subscription")
    assert [e["outcome"] for e in _of(events, "turn.ended")] == ["aborted"]
    assert replies.messages == []
    await wait_for(lambda: _of(events, "message.dropped"), what="message.dropped")
    assert [(d["inbound_id"], d["reason"]) for d in _of(events, "message.dropped")] == [(stalled["id"], "stale_generation")]
    await _new_session_starts_empty(service, nc, subjects, sid, "stalled words")


@pytest.mark.rule("SM-21", "SM-22")
async def test_a_late_journal_write_of_a_deleted_turn_never_reaches_the_new_session(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = _sid("late")
    assert service.engines is not None and service.actors is not None
    held = HeldJournal(service.engines.journal, sid, EntryKind.AGENT_MESSAGE)
    service.engines.journal = held  # type: ignore[assignment]
    service.actors.stop_wait_s = 0.2  # the deletion gives up waiting for the stuck write
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    await publish_inbound(nc, subjects, inbound(sid, "words written late"))
    await wait_for(held.held.is_set, what="the model's answer to be in flight to the journal")
    old_generation = service.manager.generation_of(sid)

    deleted = await api(nc, subjects, "session", "delete", {"session_id": sid})
    assert deleted["ok"], deleted
    held.release.set()  # the write lands after the deletion's clear
    await wait_for(held.landed.is_set, what="the late write")
    await wait_for(lambda: _of(events, "turn.ended"), what="the stopped turn to end")
    assert [(e["outcome"], e["generation"]) for e in _of(events, "turn.ended")] == [("aborted", old_generation)]
    # The late rows are there, under the old generation only.
    late = await held.load(sid, generation=old_generation)
    assert any(e.kind == EntryKind.AGENT_MESSAGE for e in late)
    assert await held.load(sid, generation=service.manager.generation_of(sid)) == []
    assert replies.messages == []
    await _new_session_starts_empty(service, nc, subjects, sid, "words written late")


def _entry(seq: int, text: str) -> JournalEntry:
    return JournalEntry(seq=seq, kind=EntryKind.USER_MESSAGE, at="2025-01-01T00:00:00+00:00", payload={"text": text})


@pytest.mark.rule("SM-21")
async def test_start_up_removes_an_orphaned_journal(
    settings: Settings, nc: Client, subjects: Subjects, db_url: str
) -> None:
    settings = settings.model_copy(update={"database_url": db_url})
    orphan, deleted = _sid("orphan"), _sid("deleted")
    service = TurnstileService(settings)
    await service.start()
    try:
        created = await api(nc, subjects, "session", "create", {"fields": {"id": deleted}})
        assert created["ok"], created
        gone = await api(nc, subjects, "session", "delete", {"session_id": deleted})
        assert gone["ok"], gone
    finally:
        await service.stop()

    # A crash between the record removal and the clear: rows of a session without a record,
    # and rows of a generation older than the session's.
    db = create_db_engine(db_url)
    try:
        await migrate(db)
        journal = SqlHistoryJournal(db)
        await journal.append(orphan, [_entry(0, "orphaned words")], generation=0)
        await journal.append(deleted, [_entry(0, "deleted words")], generation=0)
        await journal.aclose()
    finally:
        await db.dispose()

    service = TurnstileService(settings)
    await service.start()
    try:
        assert service.engines is not None
        assert await service.engines.journal.load(orphan, generation=0) == []
        assert await service.engines.journal.load(deleted, generation=0) == []
        await _new_session_starts_empty(service, nc, subjects, orphan, "orphaned words")
    finally:
        await service.stop()


@pytest.mark.rule("SM-22", "MQ-5")
async def test_a_reply_about_to_go_out_when_its_session_is_deleted_is_never_sent(
    service: TurnstileService, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The deletion lands after the turn's post-run generation check, while its reply waits for
    # the checkpoint that holds it: the reply must not be stored after session.deleted.
    from consumers.replies import ReplySender

    sid = _sid("late-reply")
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    original = ReplySender.deliver_outputs
    deletions: list[asyncio.Future[Any]] = []

    async def delete_first(self: ReplySender, *args: Any) -> int:
        manager = service.manager
        if self.session_id == sid and manager is not None:
            before = manager.generation_of(sid)
            deletions.append(asyncio.ensure_future(manager.delete_session(sid)))
            await wait_for(lambda: manager.generation_of(sid) != before, timeout_s=5, interval_s=0,
                           what="the deletion to change the generation")
        return await original(self, *args)

    monkeypatch.setattr(ReplySender, "deliver_outputs", delete_first)
    await publish_inbound(nc, subjects, inbound(sid, "answer me"))
    await wait_for(lambda: _of(events, "message.dropped"), what="the stale-generation drop")
    assert _of(events, "message.dropped")[0]["reason"] == "stale_generation"
    ended = await wait_for(lambda: _stored_turn_ended(service, subjects, sid), what="the stored turn.ended")
    assert ended["outcome"] == "aborted"
    await wait_for(lambda: "session.deleted" in [e["type"] for e in events.json()], what="session.deleted")
    assert service.js is not None
    info = await service.js.stream_info(subjects.outbound_stream, subjects_filter=subjects.outbound("cli", sid))
    assert info.state.messages == 0 and not replies.messages
    await asyncio.gather(*deletions)
