"""A message served from the stream after MaxDeliver keeps its place before the session's next message.

The timing that broke order in the fault suite under load, driven here on purpose: the MAX_DELIVERIES
advisory reaches the service before the session's next message is even published, but the service's
stream read of the given-up message is held until the fetch loop has that next message in hand.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import orjson
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

import consumers.max_deliveries
from consumers.nats_server import NatsServer
from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def settings(nats_server: NatsServer, tmp_path: Path) -> Settings:
    # One delivery allowed and a 1 s ack wait: the stolen delivery reaches MaxDeliver within a second.
    return Settings(
        nats_url=nats_server.url,
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'turnstile.db'}",
        prefix="t" + uuid.uuid4().hex[:8],
        fetch_timeout_s=0.2,
        ack_wait_s=1.0,
        max_deliver=1,
    )


async def _no_pull_waiting(js: JetStreamContext, subjects: Subjects, consumer: str) -> bool:
    info = await js.consumer_info(subjects.inbound_stream, consumer)
    return info.num_waiting == 0


async def test_a_message_served_after_max_deliveries_is_answered_before_the_sessions_next_message(
    service: TurnstileService, settings: Settings, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = service.inbound
    assert loop is not None
    js = nc.jetstream()
    sid = f"maxdel-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))

    # The fetch loop takes no new work for a while, as when the process is paused.
    paused = True
    waiting_for_room = asyncio.Event()
    room, wait_for_room = loop.pipeline.room, loop.pipeline.wait_for_room

    async def noted_wait_for_room(timeout_s: float) -> None:
        waiting_for_room.set()
        await wait_for_room(timeout_s)

    monkeypatch.setattr(loop.pipeline, "room", lambda: 0 if paused else room())
    monkeypatch.setattr(loop.pipeline, "wait_for_room", noted_wait_for_room)
    await wait_for(waiting_for_room.is_set, what="the fetch loop to stop fetching")
    await wait_for(lambda: _no_pull_waiting(js, subjects, settings.consumer_name), what="its pull requests to expire")

    # The service's stream read of a given-up message is held until released.
    read_entered, read_released = asyncio.Event(), asyncio.Event()
    read_recovered = consumers.max_deliveries.read_recovered

    async def held_read(nc: Client, js: JetStreamContext, stream: str, consumer: str, seq: int) -> Msg | None:
        read_entered.set()
        await read_released.wait()
        return await read_recovered(nc, js, stream, consumer, seq)

    monkeypatch.setattr(consumers.max_deliveries, "read_recovered", held_read)

    # Message #1 is delivered once to someone else and never acked: JetStream gives up on it.
    first, second = inbound(sid, "first"), inbound(sid, "second")
    await publish_inbound(nc, subjects, first)
    thief = await js.pull_subscribe_bind(settings.consumer_name, subjects.inbound_stream)
    stolen = await thief.fetch(1, timeout=5)
    assert orjson.loads(stolen[0].data)["id"] == first["id"]
    await wait_for(read_entered.is_set, what="the service to take up the MAX_DELIVERIES advisory")

    # Message #2 is published after the service learned of #1, and fetched while #1 is being read.
    admitted: list[str] = []
    process_batch = loop.process_batch

    async def noted_process_batch(msgs: list[Msg]) -> None:
        admitted.extend(orjson.loads(m.data)["id"] for m in msgs)
        await process_batch(msgs)

    monkeypatch.setattr(loop, "process_batch", noted_process_batch)
    paused = False
    await publish_inbound(nc, subjects, second)
    await wait_for(lambda: second["id"] in admitted, what="the fetch loop to take #2")
    read_released.set()

    await wait_for(lambda: len(replies.messages) == 2, timeout_s=30, what="both replies")
    assert [r["reply_to"] for r in replies.json()] == [first["id"], second["id"]]
    await thief.unsubscribe()
