"""The inbound pipeline over a real nats-server: per-message generations, no head-of-line
blocking behind a slow deletion, and staging retried in place while the database refuses writes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from consumers.service import TurnstileService
from consumers.settings import Settings
from core.sessions.incoming_message import IncomingMessage
from schemas.subjects import Subjects
from tests.integration.db_outage import refuse_writes
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def ok(nc: Client, subjects: Subjects, resource: str, verb: str, body: dict[str, Any]) -> Any:
    reply = await api(nc, subjects, resource, verb, body)
    assert reply["ok"], reply
    return reply["result"]


class HeldClears:
    """Holds the data clear of chosen deleted sessions (their deletion stays in progress) until released."""

    def __init__(self, service: TurnstileService, hold: Callable[[str], bool]) -> None:
        self._original: Callable[[Sequence[str]], Awaitable[None]] = service._clear_session_data
        self._hold = hold
        self.entered: set[str] = set()
        self.release: dict[str, asyncio.Event] = {}
        service.manager.set_clear_session_data(self._clear)

    def gate(self, session_id: str) -> asyncio.Event:
        return self.release.setdefault(session_id, asyncio.Event())

    async def _clear(self, session_ids: Sequence[str]) -> None:
        for session_id in session_ids:
            if self._hold(session_id):
                self.entered.add(session_id)
                await self.gate(session_id).wait()
        await self._original(session_ids)


class WatchedRecording:
    """Notes which inbound ids entered and left ``record_inbound``."""

    def __init__(self, service: TurnstileService, gates: dict[str, asyncio.Event] | None = None) -> None:
        self.entered: set[str] = set()
        self.returned: set[str] = set()
        self.calls: list[str] = []  # every call, in order (a redelivery calls again)
        self._gates = gates or {}
        manager = service.manager
        self._original = manager.record_inbound
        manager.record_inbound = self._record

    async def _record(self, message: IncomingMessage) -> None:
        self.entered.add(message.id)
        self.calls.append(message.id)
        if message.id in self._gates:  # a controlled slow recording
            await self._gates[message.id].wait()
        await self._original(message)
        self.returned.add(message.id)


@pytest.mark.rule("SM-22", "MQ-5")
async def test_a_message_keeps_the_generation_in_force_when_its_own_recording_finished(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    blocker, slow, x = uid("blocker"), uid("slow"), uid("x")
    for sid in (blocker, slow):
        await ok(nc, subjects, "session", "create", {"fields": {"id": sid}})
    x_replies = await Collector().attach(nc, subjects.outbound("cli", x))
    x_events = await Collector().attach(nc, subjects.events_of(x))
    # x is busy with a long turn, so its next message waits in the actor's mailbox.
    await publish_inbound(nc, subjects, inbound(x, "/stall 30\nbusy"))
    await wait_for(lambda: "turn.started" in [e["type"] for e in x_events.json()], what="x's running turn")

    held = HeldClears(service, lambda sid: sid in (blocker, slow))
    recording = WatchedRecording(service)
    deleting = [asyncio.create_task(service.manager.delete_session(sid)) for sid in (blocker, slow)]
    await wait_for(lambda: held.entered == {blocker, slow}, what="both deletions held in their data clear")
    first = inbound(blocker, "behind the blocker's deletion")
    await publish_inbound(nc, subjects, first)
    await wait_for(lambda: first["id"] in recording.entered, what="the blocker's message in record_inbound")
    # Fetched together (the old loop took them as one batch once the blocker's batch was done).
    behind_slow, for_x = inbound(slow, "behind the slow deletion"), inbound(x, "recorded before x's deletion")
    await publish_inbound(nc, subjects, behind_slow)
    await publish_inbound(nc, subjects, for_x)
    held.gate(blocker).set()
    await wait_for(lambda: for_x["id"] in recording.returned, what="x's message recorded")
    assert behind_slow["id"] not in recording.returned  # still waiting behind the slow deletion

    old_generation = service.manager.generation_of(x)
    await service.manager.delete_session(x)  # after for_x's own recording finished
    assert service.manager.generation_of(x) != old_generation
    held.gate(slow).set()
    await asyncio.gather(*deleting)

    def dropped() -> list[str]:
        return [
            e["data"]["inbound_id"]
            for e in x_events.json()
            if e["type"] == "message.dropped" and e["data"]["reason"] == "stale_generation"
        ]

    def answers() -> list[dict[str, Any]]:
        return [r for r in x_replies.json() if r["reply_to"] == for_x["id"]]

    await wait_for(lambda: for_x["id"] in dropped() or answers(), what="x's message dropped or answered")
    assert service.actors is not None
    await service.actors.join(timeout_s=10)
    # SM-22: recorded before x's deletion started → the old generation → dropped, never answered.
    assert answers() == [] and for_x["id"] in dropped()


@pytest.mark.rule("MQ-2", "SM-17")
async def test_unrelated_sessions_are_answered_while_a_large_subtree_is_being_deleted(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    manager = service.manager
    parent = uid("tree")
    await ok(nc, subjects, "session", "create", {"fields": {"id": parent}})
    for _ in range(200):
        await manager.create_child_session(parent)
    timeline = await Collector().attach(nc, f"{subjects.prefix}.>")
    # The deletion is held in its first data clear: the parent's session.deleted comes after it.
    first_clear: list[str] = []

    def hold_first(session_id: str) -> bool:
        if first_clear:
            return False
        first_clear.append(session_id)
        return True

    held = HeldClears(service, hold_first)
    recording = WatchedRecording(service)
    deletion = asyncio.create_task(manager.delete_session(parent))
    await wait_for(lambda: held.entered, what="the deletion under way")
    waiting = inbound(parent, "sent during the deletion")
    await publish_inbound(nc, subjects, waiting)
    await wait_for(lambda: waiting["id"] in recording.entered, what="the parent's message in record_inbound")

    others = [uid("other") for _ in range(4)]
    bodies = [inbound(others[i % 4], f"n{i // 4}") for i in range(12)]
    for body in bodies:
        await publish_inbound(nc, subjects, body)
    outbound = f"{subjects.prefix}.outbound."

    def answered() -> set[str]:
        return {r["reply_to"] for m, r in zip(timeline.messages, timeline.json(), strict=True) if m.subject.startswith(outbound)}

    # Answered while the deletion of the parent is still running (its message still waits).
    await wait_for(lambda: {b["id"] for b in bodies} <= answered(), what="unrelated replies during the deletion")
    assert manager.is_deleting(parent) and waiting["id"] not in recording.returned
    held.gate(first_clear[0]).set()
    deleted_ids = await deletion
    assert len(deleted_ids) == 201
    await wait_for(lambda: waiting["id"] in answered(), what="the parent's message answered afterwards")

    kinds = [
        ("reply", body["reply_to"]) if m.subject.startswith(outbound) else ("event", body["type"])
        for m, body in zip(timeline.messages, timeline.json(), strict=True)
        if m.subject.startswith(outbound) or m.subject == subjects.event(parent, "session.deleted")
    ]
    parent_deleted = kinds.index(("event", "session.deleted"))
    assert all(kinds.index(("reply", b["id"])) < parent_deleted for b in bodies)
    assert kinds.index(("reply", waiting["id"])) > parent_deleted  # the new generation, after the deletion
    waiting_reply = next(r for r in timeline.json() if r.get("reply_to") == waiting["id"])
    assert waiting_reply["generation"] == manager.generation_of(parent) != 0
    by_session: dict[str, list[str]] = {}
    for m, r in zip(timeline.messages, timeline.json(), strict=True):
        if m.subject.startswith(outbound) and r["session_id"] in others:
            by_session.setdefault(r["session_id"], []).append(r["text"])
    assert by_session == {sid: [f"echo: n{k}" for k in range(3)] for sid in others}


@pytest.mark.rule("MQ-2")
async def test_a_later_message_never_overtakes_its_sessions_earlier_one_whose_recording_is_slow(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid, other = uid("lane"), uid("lane-other")
    replies = await Collector().attach(nc, f"{subjects.prefix}.outbound.>")
    slow = inbound(sid, "first, slow to record")
    relayed = inbound(sid, "second, recorded at once", source="relay")  # non-native: nothing to file
    unrelated = inbound(other, "unrelated")
    gate = asyncio.Event()
    recording = WatchedRecording(service, {slow["id"]: gate})
    for body in (slow, relayed, unrelated):
        await publish_inbound(nc, subjects, body)
    await wait_for(lambda: unrelated["id"] in {r["reply_to"] for r in replies.json()}, what="the unrelated reply")
    await wait_for(lambda: relayed["id"] in recording.returned, what="the second message recorded")
    # Recorded but held behind its session's first message, which is still being recorded.
    assert [r for r in replies.json() if r["session_id"] == sid] == []
    assert service.inbox is not None and await service.inbox.status_of("cli", relayed["id"]) is None
    gate.set()
    await wait_for(lambda: len(replies.messages) >= 3, what="both replies of the session")
    assert [r["reply_to"] for r in replies.json() if r["session_id"] == sid] == [slow["id"], relayed["id"]]


@pytest.fixture
async def short_ack_wait_service(settings: Settings) -> AsyncIterator[TurnstileService]:
    svc = TurnstileService(settings.model_copy(update={"ack_wait_s": 1.0}))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


@pytest.mark.rule("MQ-8")
async def test_a_message_held_past_the_ack_wait_gets_heartbeats_and_is_not_redelivered(
    short_ack_wait_service: TurnstileService, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = short_ack_wait_service
    beats: list[str] = []
    in_progress = Msg.in_progress

    async def counted(msg: Msg) -> None:
        beats.append(msg.subject)
        await in_progress(msg)

    monkeypatch.setattr(Msg, "in_progress", counted)
    sid = uid("held")
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    body = inbound(sid, "held past the ack wait")
    gate = asyncio.Event()
    recording = WatchedRecording(service, {body["id"]: gate})  # held as if behind a long deletion
    await publish_inbound(nc, subjects, body)
    # Four heartbeats a third of the ack wait apart: longer than the 1 s ack wait has passed.
    await wait_for(lambda: len(beats) >= 4 or len(recording.calls) > 1, what="heartbeats or a redelivery")
    assert recording.calls == [body["id"]]  # not redelivered meanwhile
    gate.set()
    await wait_for(lambda: replies.messages, what="the reply")
    assert service.actors is not None
    await service.actors.join(timeout_s=10)
    info = await nc.jetstream().consumer_info(subjects.inbound_stream, service.settings.consumer_name)
    assert info.num_redelivered == 0 and info.num_ack_pending == 0
    assert recording.calls == [body["id"]] and len(replies.messages) == 1


@pytest.fixture
def db_settings(settings: Settings, db_url: str) -> Settings:
    return settings.model_copy(update={"database_url": db_url})


@pytest.fixture
async def db_service(db_settings: Settings) -> AsyncIterator[TurnstileService]:
    svc = TurnstileService(db_settings)
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


@pytest.mark.rule("MQ-8", "MQ-2")
async def test_staging_is_retried_in_place_while_the_database_refuses_writes(
    db_service: TurnstileService, db_url: str, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = db_service
    sessions = [uid("outage") for _ in range(4)]
    replies = await Collector().attach(nc, f"{subjects.prefix}.outbound.>")
    health = await Collector().attach(nc, subjects.events_of(None))
    for sid in sessions:  # filed before the outage: recording during it writes nothing
        await publish_inbound(nc, subjects, inbound(sid, "n0"))
    await wait_for(lambda: len(replies.messages) >= 4, what="the first replies")
    assert service.actors is not None and service.inbound is not None
    await service.actors.join(timeout_s=10)

    sent: list[dict[str, Any]] = []
    async with refuse_writes(db_url, monkeypatch):
        for k in range(1, 4):
            for sid in sessions:
                sent.append(inbound(sid, f"n{k}"))
                await publish_inbound(nc, subjects, sent[-1])
        await wait_for(lambda: [e["type"] for e in health.json()] == ["service.degraded"], what="service.degraded")
        assert service.inbound.degraded
        for k in range(4, 6):  # still arriving while degraded
            for sid in sessions:
                sent.append(inbound(sid, f"n{k}"))
                await publish_inbound(nc, subjects, sent[-1])
    await wait_for(lambda: "service.recovered" in [e["type"] for e in health.json()], what="service.recovered")
    await wait_for(lambda: len(replies.messages) >= 4 + len(sent), timeout_s=40, what="every reply")
    await service.actors.join(timeout_s=10)
    assert not service.inbound.degraded
    assert [e["type"] for e in health.json()] == ["service.degraded", "service.recovered"]
    assert health.subjects()[0] == subjects.event(None, "service.degraded")
    answers = replies.json()
    assert sorted(r["reply_to"] for r in answers[4:]) == sorted(b["id"] for b in sent)  # each once
    for sid in sessions:
        assert [r["text"] for r in answers if r["session_id"] == sid] == [f"echo: n{k}" for k in range(6)]
