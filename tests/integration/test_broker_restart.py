"""The inbound fetch loop survives a nats-server restart (nats.py #504: pull subscriptions going silent)."""

from __future__ import annotations

import uuid

import pytest
from nats.aio.client import Client

from consumers.nats_server import NatsServer
from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for


async def _publish_when_back(nc: Client, subjects: Subjects, body: dict[str, object]) -> bool:
    try:
        await publish_inbound(nc, subjects, body)  # type: ignore[arg-type]
    except Exception:
        return False
    return True


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """A lease TTL longer than a restart on a loaded machine. A broker away past the TTL's renewal window
    fences the service by design, and ``turnstile run`` then competes for ownership again with a new
    service (tests/integration/test_broker_outage.py); this test is about one service's fetch loop
    coming back, not about the lease."""
    return settings.model_copy(update={"lease_ttl_s": 30.0})


@pytest.mark.timeout(90)
async def test_messages_are_answered_after_the_broker_restarts(
    service: TurnstileService, nats_server: NatsServer, nc: Client, subjects: Subjects
) -> None:
    sid = f"restart-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await publish_inbound(nc, subjects, inbound(sid, "before"))
    await wait_for(lambda: replies.messages, what="reply before the restart")

    await nats_server.stop()
    await nats_server.start()  # same port, same store: streams and the durable consumer survive
    after = inbound(sid, "after")
    await wait_for(lambda: _publish_when_back(nc, subjects, after), timeout_s=30, what="publish after restart")
    await wait_for(lambda: len(replies.messages) >= 2, timeout_s=60, what="reply after the restart")
    assert [r["text"] for r in replies.json()] == ["echo: before", "echo: after"]
