"""A cold session's restore takes the last checkpoint read while its message was staged
(consumers/checkpoint_prefetch.py). Real nats-server, SQLite file; ``max_loaded_sessions=1``: a message
to a second session unloads the first, as 10,000 sessions meet the cap."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, answered_then_unloaded, inbound, publish_inbound, wait_for

pytestmark = [pytest.mark.timeout(90)]


@pytest.mark.rule("MQ-2")
async def test_a_cold_session_is_restored_from_the_checkpoint_read_while_its_message_was_staged(
    settings: Settings, nc: Client, subjects: Subjects
) -> None:
    service = TurnstileService(settings.model_copy(update={"max_loaded_sessions": 1, "actor_idle_s": 3600.0}))
    await service.start()
    try:
        publisher = service.publisher
        assert publisher is not None
        sid = f"prefetch-{uuid.uuid4().hex[:6]}"
        replies = await Collector().attach(nc, subjects.outbound("cli", sid))
        await answered_then_unloaded(service, nc, subjects, sid, replies)
        own_reads: list[str] = []  # reads the restore makes itself (the prefetch holds its own reference)
        read = publisher.last_checkpoint

        async def counted(session_id: str) -> Any:
            own_reads.append(session_id)
            return await read(session_id)

        publisher.last_checkpoint = counted  # type: ignore[method-assign]
        registry = service.metrics.registry

        def restore_reads(prefetched: str) -> float:
            return registry.get_sample_value("turnstile_restore_checkpoint_reads_total", {"prefetched": prefetched}) or 0.0

        used, unprefetched = restore_reads("yes"), restore_reads("no")

        await publish_inbound(nc, subjects, inbound(sid, "second"))
        await wait_for(lambda: len(replies.messages) == 2, what="the reply after the restore")
        assert sid not in own_reads  # restored from the prefetched read, and counted so on /metrics
        assert (restore_reads("yes"), restore_reads("no")) == (used + 1, unprefetched)
        # MQ-2: restored from its last checkpoint, the turn goes on from the whole transcript.
        assert [r["text"] for r in replies.json()] == ["echo: first", "echo: second"]
        last = await nc.jetstream().get_last_msg(subjects.checkpoint_stream, subjects.checkpoint(sid))
        transcript = orjson.loads(last.data or b"{}")["snapshot"]["transcript"]
        assert [i["payload"]["text"] for i in transcript if i["kind"] == "user_message"] == ["first", "second"]
    finally:
        await service.stop()
