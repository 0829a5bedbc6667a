"""Poison messages: bounded retries with backoff, then the dead-letter stream; never a silent park."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from core.errors import Unavailable
from schemas.subjects import Subjects
from tests.integration.failing_journal import FailingJournal
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for

RETRY_ATTEMPTS = 3


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # Quick retries; a lease that is not renewed during a test (the ownership test overwrites it).
    return settings.model_copy(
        update={"turn_retry_attempts": RETRY_ATTEMPTS, "turn_retry_max_backoff_s": 0.05, "lease_ttl_s": 60.0}
    )


def _failing_journal(service: TurnstileService, marker: str, error: Any, times: int | None = None) -> FailingJournal:
    assert service.engines is not None
    journal = FailingJournal(service.engines.journal, marker, error, times)
    service.engines.journal = journal  # type: ignore[assignment]
    return journal


async def _answered(nc: Client, subjects: Subjects, sid: str, replies: Collector) -> None:
    body = inbound(sid, "warm-up")
    await publish_inbound(nc, subjects, body)
    await wait_for(lambda: any(r["reply_to"] == body["id"] for r in replies.json()), what="the warm-up reply")


def _index(messages: list[tuple[str, dict[str, Any]]], match: Any) -> int:
    return next(i for i, (subject, data) in enumerate(messages) if match(subject, data))


async def test_a_message_that_keeps_failing_is_dead_lettered_and_the_next_one_is_answered_after_it(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"poison-{uuid.uuid4().hex[:6]}"
    journal = _failing_journal(service, "POISON", lambda: RuntimeError("journal exploded"))
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await _answered(nc, subjects, sid, replies)
    everything = await Collector().attach(nc, f"{subjects.prefix}.>")
    dlq = await Collector().attach(nc, subjects.dlq_turn)
    poison, after = inbound(sid, "POISON pill"), inbound(sid, "next one")
    await publish_inbound(nc, subjects, poison)
    await publish_inbound(nc, subjects, after)

    # Answered without a restart, after the poisoned message was given up.
    await wait_for(lambda: any(r["reply_to"] == after["id"] for r in replies.json()), what="the next reply")
    assert journal.failures == RETRY_ATTEMPTS
    letter = (await wait_for(lambda: dlq.json(), what="a dead letter"))[0]
    assert letter["error"]["code"] == "internal" and "journal exploded" in letter["error"]["message"]
    assert letter["session_id"] == sid and letter["subject"] == subjects.inbound("cli", sid)
    assert orjson.loads(letter["raw"]) == poison
    assert dlq.messages[0].headers and dlq.messages[0].headers["Turnstile-Error-Code"] == "internal"
    seen = [(m.subject, orjson.loads(m.data)) for m in everything.messages if not m.subject.startswith("_")]
    dropped = _index(seen, lambda s, d: d.get("type") == "message.dropped" and d["data"]["inbound_id"] == poison["id"])
    assert seen[dropped][1]["data"]["reason"] == "failed"
    assert seen[dropped][1]["data"]["detail"].startswith("internal: RuntimeError('journal exploded')")
    reply = _index(seen, lambda s, d: s.startswith(f"{subjects.prefix}.outbound.") and d["reply_to"] == after["id"])
    assert dropped < reply  # order kept: the next message waited for the poisoned one to be given up
    assert not any(r["reply_to"] == poison["id"] for r in replies.json())
    assert service.inbox is not None
    await service.inbox.flush()
    assert await service.inbox.status_of("cli", poison["id"]) == "dropped"


async def test_a_transient_failure_is_retried_and_answered_exactly_once(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"transient-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    dlq = await Collector().attach(nc, subjects.dlq_all)
    journal = _failing_journal(service, "FLAKY", lambda: Unavailable("database is locked"), times=2)
    await _answered(nc, subjects, sid, replies)
    body = inbound(sid, "FLAKY but fine")
    await publish_inbound(nc, subjects, body)

    await wait_for(lambda: any(r["reply_to"] == body["id"] for r in replies.json()), what="the reply")
    assert service.actors is not None
    await service.actors.join(timeout_s=20)
    assert journal.failures == 2
    assert [r["text"] for r in replies.json() if r["reply_to"] == body["id"]] == ["echo: FLAKY but fine"]
    assert not dlq.messages
    assert not [e for e in events.json() if e["type"] == "message.dropped"]
    assert service.inbox is not None
    await service.inbox.flush()
    assert await service.inbox.status_of("cli", body["id"]) == "done"


async def test_a_process_that_lost_the_session_to_another_owner_stops_without_dead_lettering(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"owned-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await _answered(nc, subjects, sid, replies)
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    dlq = await Collector().attach(nc, subjects.dlq_all)
    # Another process took over: it holds the lease and wrote the session's checkpoint since.
    js = nc.jetstream()
    kv = await js.key_value(f"{subjects.stream_prefix}_LEASES")
    await kv.put("owner", b"other-host:1:takeover")
    last = await js.get_last_msg(subjects.checkpoint_stream, subjects.checkpoint(sid))
    await js.publish(subjects.checkpoint(sid), last.data)
    body = inbound(sid, "who serves me?")
    await publish_inbound(nc, subjects, body)

    # This process tries once (its checkpoint is refused by the fence), then stops.
    await wait_for(lambda: any(c.get("inbound_id") == body["id"] for c in checkpoints.json()), what="the attempt")
    assert service.actors is not None
    await service.actors.join(timeout_s=20)
    assert not any(r["reply_to"] == body["id"] for r in replies.json())
    assert not dlq.messages
    assert service.inbox is not None
    await service.inbox.flush()
    assert await service.inbox.status_of("cli", body["id"]) == "staged"  # left for the owner


async def test_a_message_that_cannot_even_be_dead_lettered_is_served_again_ahead_of_the_next(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"nodlq-{uuid.uuid4().hex[:6]}"
    # One failure more than a pass of retries: the second pass succeeds.
    journal = _failing_journal(service, "STUBBORN", lambda: RuntimeError("journal exploded"), RETRY_ATTEMPTS + 1)
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await _answered(nc, subjects, sid, replies)
    await nc.jetstream().delete_stream(subjects.dlq_stream)  # the dead letter cannot be stored
    first, after = inbound(sid, "STUBBORN one"), inbound(sid, "next one")
    await publish_inbound(nc, subjects, first)
    await publish_inbound(nc, subjects, after)

    await wait_for(lambda: any(r["reply_to"] == after["id"] for r in replies.json()), what="the next reply")
    assert journal.failures == RETRY_ATTEMPTS + 1
    order = [r["reply_to"] for r in replies.json()]
    assert order.index(first["id"]) < order.index(after["id"])
