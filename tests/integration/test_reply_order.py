"""A session's replies are stored in the order they were produced, even when one of them was lost.

A reply published just before the outbound stream's leader dies can be lost with its ack (on a
cluster: the node was killed). Here the loss is made deterministic: the first reply of a session
is never sent and its ack fails, and the session's next message is served at once. The later
reply must not be stored before the lost one is stored again (docs/protocol.md#reply-order).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js.errors import NoStreamResponseError

from consumers import message_finisher as finisher
from consumers.publisher import Publisher
from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from schemas.wire import OutboundReply
from tests.integration.harness import inbound, publish_inbound, wait_for
from tests.integration.test_exactly_once_delivery import stored_replies


class LoseFirstReply:
    """Wraps ``Publisher.outbound``: the session's first reply is not sent and its ack fails
    (``fail_now``) or never comes (the publisher's timeout runs out), like a reply that reached a
    stream leader which died before storing it."""

    def __init__(self, publisher: Publisher, session_id: str, *, fail_now: bool) -> None:
        self.session_id = session_id
        self.fail_now = fail_now
        self.lost: list[str] = []
        self._outbound = publisher.outbound

    async def outbound(self, platform: str, reply: OutboundReply) -> asyncio.Future[Any]:
        if reply.session_id == self.session_id and not self.lost:
            self.lost.append(reply.text)
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            if self.fail_now:
                future.set_exception(NoStreamResponseError())
            return future
        return await self._outbound(platform, reply)


async def two_messages_back_to_back(
    svc: TurnstileService, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch, *, fail_now: bool
) -> tuple[str, LoseFirstReply, list[dict[str, Any]]]:
    assert svc.publisher is not None
    sid = f"order-{uuid.uuid4().hex[:6]}"
    losing = LoseFirstReply(svc.publisher, sid, fail_now=fail_now)
    monkeypatch.setattr(svc.publisher, "outbound", losing.outbound)
    bodies = [inbound(sid, "m0"), inbound(sid, "m1")]
    for body in bodies:
        await publish_inbound(nc, subjects, body)

    async def both_stored() -> bool:
        return len(await stored_replies(nc, subjects, sid)) >= 2

    await wait_for(both_stored, timeout_s=40, what="both replies stored")
    return sid, losing, bodies


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fail_now", [True, False], ids=["ack-refused", "ack-never-comes"])
async def test_a_lost_reply_is_stored_again_before_the_sessions_next_reply(
    settings: Settings, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch, fail_now: bool
) -> None:
    # The finisher's first republish comes well after the next message's turn (an echo) is done.
    monkeypatch.setattr(finisher, "RETRY_BASE_DELAY_S", 1.0)
    svc = TurnstileService(settings)
    await svc.start()
    assert svc.publisher is not None
    svc.publisher.timeout_s = 1.0  # "never comes": the wait for the ack ends after this
    try:
        sid, losing, _ = await two_messages_back_to_back(svc, nc, subjects, monkeypatch, fail_now=fail_now)
        assert losing.lost == ["echo: m0"]
        assert [r["text"] for r in await stored_replies(nc, subjects, sid)] == ["echo: m0", "echo: m1"]
    finally:
        await svc.stop()


@pytest.mark.timeout(60)
async def test_a_lost_reply_whose_finisher_gave_up_is_still_stored_before_the_next_reply_and_once_after_a_restart(
    settings: Settings, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The finisher gives up at once: the first message stays staged (answered again after a restart).
    monkeypatch.setattr(finisher, "RETRY_ATTEMPTS", 0)
    svc = TurnstileService(settings)
    await svc.start()
    try:
        sid, _, bodies = await two_messages_back_to_back(svc, nc, subjects, monkeypatch, fail_now=True)
        assert [r["text"] for r in await stored_replies(nc, subjects, sid)] == ["echo: m0", "echo: m1"]
    finally:
        await svc.stop()
    again = TurnstileService(settings)
    await again.start()
    try:
        assert again.inbox is not None
        box = again.inbox

        async def first_done() -> bool:
            return await box.status_of("cli", bodies[0]["id"]) == "done"

        await wait_for(first_done, timeout_s=30, what="the first message finished after the restart")
        assert [r["text"] for r in await stored_replies(nc, subjects, sid)] == ["echo: m0", "echo: m1"]
    finally:
        await again.stop()
