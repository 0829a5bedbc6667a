"""10.7: a deleted inbound consumer or inbound stream is recreated and intake resumes (MQ-1)."""

from __future__ import annotations

import uuid

import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for


async def _published(nc: Client, subjects: Subjects, body: dict[str, object]) -> bool:
    try:
        await publish_inbound(nc, subjects, body)
    except Exception:
        return False  # no stream bound to the subject yet
    return True


@pytest.mark.rule("MQ-1")
@pytest.mark.timeout(90)
async def test_a_deleted_inbound_consumer_is_recreated_and_later_messages_are_answered(
    service: TurnstileService, settings: Settings, nc: Client, subjects: Subjects
) -> None:
    sid = f"consumer-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await publish_inbound(nc, subjects, inbound(sid, "before"))
    await wait_for(lambda: replies.messages, what="the reply before the deletion")
    await nc.jetstream().delete_consumer(subjects.inbound_stream, settings.consumer_name)
    for i in range(3):
        await publish_inbound(nc, subjects, inbound(sid, f"after {i}"))
    await wait_for(lambda: len(replies.messages) == 4, timeout_s=45, what="the replies after the deletion")
    assert [r["text"] for r in replies.json()] == ["echo: before", "echo: after 0", "echo: after 1", "echo: after 2"]
    info = await nc.jetstream().consumer_info(subjects.inbound_stream, settings.consumer_name)
    assert info.config.ack_wait == settings.ack_wait_s and info.config.max_deliver == settings.max_deliver


@pytest.mark.rule("MQ-1")
@pytest.mark.timeout(90)
async def test_a_deleted_inbound_stream_is_recreated_and_later_messages_are_answered(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"stream-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await publish_inbound(nc, subjects, inbound(sid, "before"))
    await wait_for(lambda: replies.messages, what="the reply before the deletion")
    await nc.jetstream().delete_stream(subjects.inbound_stream)
    first = inbound(sid, "after 0")
    await wait_for(lambda: _published(nc, subjects, first), timeout_s=45, what="the inbound stream to be back")
    await publish_inbound(nc, subjects, inbound(sid, "after 1"))
    await wait_for(lambda: len(replies.messages) == 3, timeout_s=45, what="the replies after the deletion")
    assert [r["text"] for r in replies.json()] == ["echo: before", "echo: after 0", "echo: after 1"]
