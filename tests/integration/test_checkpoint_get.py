"""How a session's last checkpoint is read back (``Publisher.last_checkpoint``): a direct get where the
checkpoint stream has one replica, the JetStream API's message get otherwise or when no server answers
direct gets. Real nats-server; the requests are seen by a core subscription on the API subjects.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
from nats.aio.client import Client

from consumers.publisher import Publisher
from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, answered_then_unloaded, inbound, publish_inbound
from tests.waiting import wait_for

pytestmark = [pytest.mark.timeout(60)]


async def _gets(nc: Client, subjects: Subjects) -> tuple[Collector, Collector]:
    """Copies of the direct gets and of the API message gets on the checkpoint stream."""
    stream = subjects.checkpoint_stream
    direct = await Collector().attach(nc, f"$JS.API.DIRECT.GET.{stream}.>")
    api = await Collector().attach(nc, f"$JS.API.STREAM.MSG.GET.{stream}")
    return direct, api


async def _reopened(service: TurnstileService, nc: Client, subjects: Subjects) -> tuple[str, Collector]:
    """A session answered once, unloaded, then sent a second message: its turn reopens it from its checkpoint."""
    sid = f"reopen-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await answered_then_unloaded(service, nc, subjects, sid, replies)
    await publish_inbound(nc, subjects, inbound(sid, "second"))
    await wait_for(lambda: len(replies.messages) == 2, what="the reply after the reopen")
    return sid, replies


async def _transcript(nc: Client, subjects: Subjects, sid: str) -> list[str]:
    last = await nc.jetstream().get_last_msg(subjects.checkpoint_stream, subjects.checkpoint(sid))
    snapshot = orjson.loads(last.data or b"{}")["snapshot"]
    return [i["payload"]["text"] for i in snapshot["transcript"] if i["kind"] == "user_message"]


@pytest.fixture
async def one_loaded(settings: Settings) -> AsyncIterator[TurnstileService]:
    """A started service keeping one session loaded: a message to another session unloads the first."""
    service = TurnstileService(settings.model_copy(update={"max_loaded_sessions": 1, "actor_idle_s": 3600.0}))
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


async def test_a_reopen_reads_the_checkpoint_with_a_direct_get_where_the_stream_has_one_replica(
    one_loaded: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    assert one_loaded.settings.stream_replicas == 1
    direct, api = await _gets(nc, subjects)
    sid, replies = await _reopened(one_loaded, nc, subjects)
    assert subjects.checkpoint(sid) in [s.split(f"{subjects.checkpoint_stream}.", 1)[1] for s in direct.subjects()]
    assert api.messages == []
    assert [r["text"] for r in replies.json()] == ["echo: first", "echo: second"]
    assert await _transcript(nc, subjects, sid) == ["first", "second"]  # continued from the checkpoint read


async def test_with_direct_gets_turned_off_on_the_stream_a_reopen_reads_through_the_api(
    one_loaded: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    js = nc.jetstream()
    info = await js.stream_info(subjects.checkpoint_stream)
    await js.update_stream(dataclasses.replace(info.config, allow_direct=False))  # an operator's edit
    direct, api = await _gets(nc, subjects)
    sid, replies = await _reopened(one_loaded, nc, subjects)
    assert len(direct.messages) >= 1  # asked once, answered by nobody
    assert len(api.messages) >= 1  # then read through the API
    assert [r["text"] for r in replies.json()] == ["echo: first", "echo: second"]
    assert await _transcript(nc, subjects, sid) == ["first", "second"]


async def test_a_publisher_without_direct_gets_reads_the_checkpoint_through_the_api(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    # What a service on replicated streams builds (bootstrap: direct gets only with one replica), where a
    # follower could answer a direct get with an older checkpoint than its leader has stored. (``service``
    # made the streams.)
    js = nc.jetstream()
    sid = f"api-{uuid.uuid4().hex[:6]}"
    stored = await js.publish(subjects.checkpoint(sid), b'{"snapshot": {}}')
    direct, api = await _gets(nc, subjects)
    publisher = Publisher(nc, js, subjects, direct_gets=False)
    assert await publisher.last_checkpoint(sid) == (stored.seq, b'{"snapshot": {}}')
    assert await publisher.last_checkpoint(f"none-{sid}") is None
    await wait_for(lambda: len(api.messages) == 2, what="two API gets")
    assert direct.messages == []
