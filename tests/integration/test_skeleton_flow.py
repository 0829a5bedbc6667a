"""The walking skeleton over a real nats-server: inbound → record → turn → checkpoint → reply."""

from __future__ import annotations

import asyncio
import uuid

import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.inbox_rows import inbox_row_count
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for


@pytest.mark.rule("MQ-1", "MQ-3", "MQ-4", "SM-1", "SM-3", "SM-17")
async def test_a_published_message_is_answered_with_checkpoints_and_events(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"s-{uuid.uuid4().hex[:6]}.with dots"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    body = inbound(sid, "hello there", chat={"type": "private", "target_id": "u1", "multi_party": False})
    await publish_inbound(nc, subjects, body)

    await wait_for(lambda: replies.messages, what="a reply")
    reply = replies.json()[0]
    assert reply["text"] == "echo: hello there"
    assert reply["reply_to"] == body["id"] and reply["session_id"] == sid
    assert replies.messages[0].headers and replies.messages[0].headers.get("Nats-Msg-Id") == (
        f"{sid}:{reply['turn_id']}:{reply['seq']}"
    )
    # MQ-3: a complete snapshot per durable step, the first one for the staged message.
    await wait_for(lambda: len(checkpoints.messages) >= 2, what="checkpoints")
    cps = checkpoints.json()
    assert cps[0]["transition"] == "message_staged"
    assert all(cp["session_id"] == sid and "snapshot" in cp for cp in cps)
    # MQ-4: session and turn events, in order for the turn.
    await wait_for(lambda: "turn.ended" in [e["type"] for e in events.json()], what="turn.ended")
    types = [e["type"] for e in events.json()]
    assert "session.created" in types
    assert types.index("turn.started") < types.index("turn.ended")
    # SM-17 / MQ-1: record_inbound (which files the session and stores session.created) is
    # awaited before the message is handed to its actor, so the filing precedes the turn.
    assert types.index("session.created") < types.index("turn.started")
    # SM-17 / SM-3 / SM-1: filed as a room with its origin before the turn.
    got = await api(nc, subjects, "session", "get", {"session_id": sid})
    assert got["ok"], got
    assert got["result"]["kind"] == "room" and got["result"]["origin_platform"] == "cli"
    assert got["result"]["origin_chat"]["target_id"] == "u1"
    assert got["result"]["last_turn"]["outcome"] == "replied"


@pytest.mark.rule("MQ-2")
async def test_per_session_order_holds_for_50_messages_over_10_sessions(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    # MQ-2: turns of one session never overlap and keep arrival order; sessions run concurrently.
    run = uuid.uuid4().hex[:6]
    sessions = [f"order-{run}-{i}" for i in range(10)]
    replies = await Collector().attach(nc, f"{subjects.prefix}.outbound.cli.>")
    bodies = [inbound(sessions[i % 10], f"n{i // 10}") for i in range(50)]
    await asyncio.gather(*(publish_inbound(nc, subjects, b) for b in bodies))
    await wait_for(lambda: len(replies.messages) >= 50, timeout_s=60, what="50 replies")
    by_session: dict[str, list[str]] = {}
    for r in replies.json():
        by_session.setdefault(r["session_id"], []).append(r["text"])
    for sid in sessions:
        assert by_session[sid] == [f"echo: n{k}" for k in range(5)]


async def test_duplicates_and_replays_are_staged_once_and_answered_once(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"dup-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    body = inbound(sid, "once")
    # Same Nats-Msg-Id twice: JetStream's duplicate window drops the second.
    await publish_inbound(nc, subjects, body)
    await publish_inbound(nc, subjects, body)
    # Same message id under another Nats-Msg-Id: a replay the stream cannot see; the inbox dedups it.
    await publish_inbound(nc, subjects, body, msg_id=uuid.uuid4().hex)
    follow = inbound(sid, "after")
    await publish_inbound(nc, subjects, follow)
    await wait_for(lambda: len(replies.messages) >= 2, what="two replies")
    assert service.inbox is not None and service.actors is not None
    await service.actors.join(timeout_s=10)
    assert [r["text"] for r in replies.json()] == ["echo: once", "echo: after"]
    assert await inbox_row_count(service.db, sid) == 2


@pytest.mark.rule("MQ-9")
async def test_bad_input_goes_to_the_dead_letter_stream_and_the_next_message_is_answered(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"dlq-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    dead = await Collector().attach(nc, subjects.dlq_inbound)
    js = nc.jetstream()
    await js.publish(subjects.inbound("cli", sid), b"{this is not json")
    await js.publish(subjects.inbound("cli", sid), orjson.dumps({"id": "x", "platform": "cli"}))
    await js.publish(subjects.inbound("cli", sid), b"x" * (service.settings.max_inbound_bytes + 1))
    await publish_inbound(nc, subjects, inbound(sid, "still here"))
    await wait_for(lambda: replies.messages, what="the good message's reply")
    await wait_for(lambda: len(dead.messages) >= 3, what="three dead letters")
    letters = dead.json()
    assert [d["error"]["code"] for d in letters] == ["bad_json", "invalid", "too_large"]
    assert letters[0]["raw"] == "{this is not json"
    assert all(d["error"]["message"] for d in letters)
    assert replies.json()[0]["text"] == "echo: still here"
    # The DLQ is a stream: the letters are kept for replay.
    info = await js.stream_info(subjects.dlq_stream)
    assert info.state.messages == 3


@pytest.mark.rule("SM-21", "SM-22", "MQ-5")
async def test_delete_drops_the_queued_message_and_a_later_one_starts_a_new_session(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"del-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    running = inbound(sid, "/stall 30\nslow one")
    queued = inbound(sid, "queued behind")
    await publish_inbound(nc, subjects, running)
    await wait_for(lambda: "turn.started" in [e["type"] for e in events.json()], what="the running turn")
    await publish_inbound(nc, subjects, queued)
    assert service.inbox is not None
    await wait_for(
        lambda: service.inbox.status_of("cli", queued["id"]),  # type: ignore[union-attr]
        what="the queued message staged",
    )
    old_generation = (await api(nc, subjects, "session", "generation", {"session_id": sid}))["result"]["generation"]
    deleted = await api(nc, subjects, "session", "delete", {"session_id": sid})
    assert deleted["ok"], deleted
    assert deleted["result"]["generation"] != old_generation

    def dropped() -> list[str]:
        return [
            e["data"]["inbound_id"]
            for e in events.json()
            if e["type"] == "message.dropped" and e["data"]["reason"] == "stale_generation"
        ]

    await wait_for(lambda: queued["id"] in dropped(), what="the queued message dropped")
    after = inbound(sid, "after delete")
    await publish_inbound(nc, subjects, after)
    await wait_for(lambda: any(r["reply_to"] == after["id"] for r in replies.json()), what="reply after delete")
    texts = [r["text"] for r in replies.json()]
    assert texts == ["echo: after delete"]  # neither the running nor the queued message was answered
    assert replies.json()[0]["generation"] != old_generation
    types = [e["type"] for e in events.json()]
    assert types.index("session.deleted") < len(types) - 1 - types[::-1].index("session.created")
    got = await api(nc, subjects, "session", "get", {"session_id": sid})
    assert got["ok"] and got["result"]["created_at"] > 0


@pytest.mark.rule("MQ-2", "MQ-3")
async def test_an_idle_actor_is_evicted_and_its_session_restored_from_the_last_checkpoint(
    settings: Settings, nc: Client, subjects: Subjects
) -> None:
    # MQ-2: idle workers are evicted and restored from their last checkpoint on demand.
    service = TurnstileService(settings.model_copy(update={"actor_idle_s": 0.2}))
    await service.start()
    try:
        sid = f"idle-{uuid.uuid4().hex[:6]}"
        replies = await Collector().attach(nc, subjects.outbound("cli", sid))
        checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
        await publish_inbound(nc, subjects, inbound(sid, "first words"))
        await wait_for(lambda: replies.messages, what="the first reply")
        assert service.actors is not None
        actors = service.actors
        await wait_for(lambda: actors.get(sid) is None, what="the idle actor to be evicted")
        seen = len(checkpoints.messages)
        # Drop the journal: only the checkpoint on JetStream can bring "first words" back.
        assert service.engines is not None
        await service.engines.journal.clear(sid)
        await publish_inbound(nc, subjects, inbound(sid, "second words"))
        await wait_for(lambda: len(replies.messages) >= 2, what="the reply after eviction")
        await wait_for(lambda: len(checkpoints.messages) > seen and checkpoints.json()[-1]["transition"] == "turn_ended",
                       what="the last checkpoint")
        last = checkpoints.json()[-1]["snapshot"]
        # The restored session continued the same conversation instead of starting afresh.
        assert "first words" in last["chatend_text"] and "second words" in last["chatend_text"]
        assert [r["text"] for r in replies.json()] == ["echo: first words", "echo: second words"]
    finally:
        await service.stop()


@pytest.mark.rule("MQ-2", "MQ-3")
async def test_sessions_beyond_the_loaded_cap_are_unloaded_and_resume_from_their_last_checkpoint(
    settings: Settings, nc: Client, subjects: Subjects
) -> None:
    # Idle sessions cost their id, not their transcript: past max_loaded_sessions the least
    # recently used idle session is unloaded (long before actor_idle_s) and its next message
    # restores it from its last checkpoint.
    service = TurnstileService(settings.model_copy(update={"max_loaded_sessions": 1, "actor_idle_s": 3600.0}))
    await service.start()
    try:
        first, second = (f"lru-{uuid.uuid4().hex[:6]}" for _ in range(2))
        replies = await Collector().attach(nc, subjects.outbound("cli", first))
        others = await Collector().attach(nc, subjects.outbound("cli", second))
        checkpoints = await Collector().attach(nc, subjects.checkpoint(first))
        await publish_inbound(nc, subjects, inbound(first, "first words"))
        await wait_for(lambda: replies.messages, what="the first reply")
        assert service.actors is not None
        actors = service.actors
        assert actors.get(first) is not None
        await publish_inbound(nc, subjects, inbound(second, "another session"))
        await wait_for(lambda: others.messages, what="the other session's reply")
        await wait_for(lambda: actors.get(first) is None, what="the least recently used session to be unloaded")
        assert len(actors) <= 1
        seen = len(checkpoints.messages)
        # Drop the journal: only the checkpoint on JetStream can bring "first words" back.
        assert service.engines is not None
        await service.engines.journal.clear(first)
        await publish_inbound(nc, subjects, inbound(first, "second words"))
        await wait_for(lambda: len(replies.messages) >= 2, what="the reply after unloading")
        await wait_for(lambda: len(checkpoints.messages) > seen and checkpoints.json()[-1]["transition"] == "turn_ended",
                       what="the last checkpoint")
        last = checkpoints.json()[-1]["snapshot"]
        assert "first words" in last["chatend_text"] and "second words" in last["chatend_text"]
        assert [r["text"] for r in replies.json()] == ["echo: first words", "echo: second words"]
    finally:
        await service.stop()


@pytest.mark.rule("MQ-2", "MQ-3")
async def test_a_session_created_here_opens_without_reads_and_a_known_one_is_restored(
    settings: Settings, nc: Client, subjects: Subjects
) -> None:
    # MQ-2 / MQ-3: a session this process just filed has no journal and no checkpoint of its
    # generation, so its first turn reads neither; a session that existed before this process
    # started (a restart) is restored from its last checkpoint and answers with its history.
    sid = f"new-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    svc = TurnstileService(settings)
    await svc.start()
    try:
        assert svc.engines is not None
        journal = svc.engines.journal
        loads: list[str] = []
        real_load = journal.load

        async def counting_load(session_id: str, **kw):  # type: ignore[no-untyped-def]
            loads.append(session_id)
            return await real_load(session_id, **kw)

        journal.load = counting_load  # type: ignore[method-assign]
        await publish_inbound(nc, subjects, inbound(sid, "first"))
        await wait_for(lambda: len(replies.messages) == 1, what="the first reply")
        assert loads == []
        # An id that was deleted before is opened with a full read (its history could outlive a
        # crash between the deletion and its data clear).
        other = f"reused-{uuid.uuid4().hex[:6]}"
        other_replies = await Collector().attach(nc, subjects.outbound("cli", other))
        await publish_inbound(nc, subjects, inbound(other, "before"))
        await wait_for(lambda: len(other_replies.messages) == 1, what="a reply before the deletion")
        deleted = await api(nc, subjects, "session", "delete", {"session_id": other})
        assert deleted["ok"], deleted
        await publish_inbound(nc, subjects, inbound(other, "after"))
        await wait_for(lambda: len(other_replies.messages) == 2, what="a reply after the deletion")
        assert loads == [other]
    finally:
        await svc.stop()
    svc = TurnstileService(settings)
    await svc.start()
    try:
        await publish_inbound(nc, subjects, inbound(sid, "second"))
        await wait_for(lambda: len(replies.messages) == 2, what="the reply after a restart")
        last = await nc.jetstream().get_last_msg(subjects.checkpoint_stream, subjects.checkpoint(sid))
        transcript = orjson.loads(last.data or b"{}")["snapshot"]["transcript"]
        assert [i["payload"]["text"] for i in transcript if i["kind"] == "user_message"] == ["first", "second"]
    finally:
        await svc.stop()


async def test_a_served_process_ignores_scripted_directives_unless_enabled(
    settings: Settings, nc: Client, subjects: Subjects
) -> None:
    # `turnstile run` leaves the scripted provider's test hooks off: a chat user writing
    # "/stall" or "/fail" gets a plain echo, and no turn slot is held.
    service = TurnstileService(settings.model_copy(update={"scripted_directives": False}))
    await service.start()
    try:
        sid = f"hooks-{uuid.uuid4().hex[:6]}"
        replies = await Collector().attach(nc, subjects.outbound("cli", sid))
        text = "/stall 3600\n/fail boom"
        await publish_inbound(nc, subjects, inbound(sid, text))
        await wait_for(lambda: replies.messages, what="the echo")
        assert replies.json()[0]["text"] == "echo: " + text
    finally:
        await service.stop()
