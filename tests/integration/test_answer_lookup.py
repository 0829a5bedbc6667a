"""KS-14 for as long as the journal keeps the session: a replay of an event answered many turns
ago is dropped as a duplicate, and ``answer.lookup`` finds its answer (SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client

from consumers import message_finisher as finisher
from consumers.service import TurnstileService
from consumers.settings import Settings
from core.engine.state import MAX_EXTERNAL_EVENTS
from core.store.inbox import StagedMessage
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for
from tests.integration.ks_helpers import events_of

TURNS = MAX_EXTERNAL_EVENTS + 5


@pytest.fixture
async def service_on(settings: Settings, db_url: str) -> AsyncIterator[TurnstileService]:
    svc = TurnstileService(settings.model_copy(update={"database_url": db_url}))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


@pytest.mark.rule("KS-14", "MQ-8")
@pytest.mark.timeout(120)
async def test_an_event_answered_many_turns_ago_is_not_answered_again_and_can_be_looked_up(
    service_on: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"old-{uuid.uuid4().hex[:8]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    event_ids = [f"ev-{i}-{uuid.uuid4().hex[:6]}" for i in range(TURNS)]
    for i, event_id in enumerate(event_ids):
        await publish_inbound(nc, subjects, inbound(sid, f"message {i}", external_event_id=event_id))
    await wait_for(lambda: len(replies.messages) == TURNS, timeout_s=60, what="every answer")
    first = replies.json()[0]
    assert first["external_event_id"] == event_ids[0]

    replay = inbound(sid, "message 0", external_event_id=event_ids[0])  # the platform sends the event again
    await publish_inbound(nc, subjects, replay)
    await wait_for(lambda: events_of(events, "message.dropped"), what="the replay dropped")
    dropped = events_of(events, "message.dropped")[0]["data"]
    assert dropped["inbound_id"] == replay["id"] and dropped["reason"] == "duplicate"
    info = await nc.jetstream().stream_info(subjects.outbound_stream, subjects_filter=subjects.outbound("cli", sid))
    assert info.state.messages == TURNS
    assert len(events_of(events, "turn.started")) == TURNS

    got = await api(nc, subjects, "answer", "lookup", {"session_id": sid, "external_event_id": event_ids[0]})
    assert got["ok"], got
    result = got["result"]
    assert result["answered"] is True and result["turn_id"] == first["turn_id"]
    assert [(r["seq"], r["text"]) for r in result["replies"]] == [(first["seq"], "echo: message 0")]


@pytest.mark.rule("KS-14")
async def test_answer_lookup_tells_unanswered_events_unknown_sessions_and_bad_requests_apart(
    service_on: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"look-{uuid.uuid4().hex[:8]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await publish_inbound(nc, subjects, inbound(sid, '/tool reply {"text": "one"}\n/say two', external_event_id="e1"))
    await wait_for(lambda: len(replies.messages) == 2, what="both replies")
    got = await api(nc, subjects, "answer", "lookup", {"session_id": sid, "external_event_id": "e1"})
    assert [(r["seq"], r["text"]) for r in got["result"]["replies"]] == [(r["seq"], r["text"]) for r in replies.json()]
    never = await api(nc, subjects, "answer", "lookup", {"session_id": sid, "external_event_id": "e2"})
    assert never == {"ok": True, "result": {"answered": False, "turn_id": None, "replies": []}}
    unknown = await api(nc, subjects, "answer", "lookup", {"session_id": "nobody-here", "external_event_id": "e1"})
    assert unknown["error"]["code"] == "not_found"
    bad = await api(nc, subjects, "answer", "lookup", {"session_id": sid})
    assert bad["error"]["code"] == "invalid"


@pytest.mark.rule("KS-14", "MQ-8")
async def test_a_replay_while_the_first_message_is_still_unfinished_is_dropped_once_its_answer_is_stored(
    service_on: TurnstileService, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first message's done mark never lands (as if its acks were slow): the replay finds the whole
    # answer in the outbound stream, publishes nothing and is dropped as a duplicate.
    sid = f"slow-{uuid.uuid4().hex[:8]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    first = inbound(sid, "hello", external_event_id="e-slow")
    finish = finisher.TurnFinisher.finish

    def never_the_first(self: finisher.TurnFinisher, staged: StagedMessage) -> None:
        if staged.message_id != first["id"]:
            finish(self, staged)

    monkeypatch.setattr(finisher.TurnFinisher, "finish", never_the_first)
    await publish_inbound(nc, subjects, first)
    await wait_for(lambda: replies.messages, what="the answer")
    replay = inbound(sid, "hello", external_event_id="e-slow")
    await publish_inbound(nc, subjects, replay)
    await wait_for(lambda: events_of(events, "message.dropped"), what="the replay dropped")
    dropped = events_of(events, "message.dropped")[0]["data"]
    assert dropped["inbound_id"] == replay["id"] and dropped["reason"] == "duplicate"
    assert service_on.inbox is not None
    assert await service_on.inbox.status_of("cli", first["id"]) == "staged"
    info = await nc.jetstream().stream_info(subjects.outbound_stream, subjects_filter=subjects.outbound("cli", sid))
    assert info.state.messages == 1
