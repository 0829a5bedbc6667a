"""A turn whose partition moved while it ran (its answer's journal append refused by the SQL epoch fence)
leaves its message staged for the new owner: it is not finished as a failed turn.

Found on the 3-node cluster (tests/integration/test_partitioned_cluster.py, a node SIGKILLed): the
refusal (``OwnershipLost``) was taken for the turn's own failure (outcome ``error``), the message was marked
done, and the new owner never answered it — the session's later messages were answered, that one never.
Driven here with SQLite (one process owns every partition): the partition's stored epoch is moved on, as
a new owner's takeover does, while the turn waits on its model (``/stall``).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from nats.aio.client import Client
from sqlalchemy import update

from consumers.bootstrap import Runtime
from consumers.service import TurnstileService
from consumers.settings import Settings
from core.engine.session import Session
from core.store.partition_epochs import partition_epochs
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for

pytestmark = [pytest.mark.timeout(90), pytest.mark.rule("MQ-8")]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"partitions": 4})


async def _served_session(service: TurnstileService, name: str) -> tuple[Runtime, str, int]:
    """The service's runtime, a new session id and its partition, once this process has taken it."""
    runtime = service.runtime
    assert runtime is not None and runtime.partitioned is not None
    parts = runtime.partitioned
    sid = f"{name}-{uuid.uuid4().hex[:6]}"
    partition = parts.partition_of(sid)
    await wait_for(lambda: partition in parts.loops, timeout_s=30, what="the partition to be taken")
    return runtime, sid, partition


async def _taken_over(runtime: Runtime, partition: int) -> None:
    """Move the partition's stored epoch on, as a newer owner's takeover does."""
    async with runtime.connections.db.begin() as conn:
        await conn.execute(
            update(partition_epochs).where(partition_epochs.c.partition == partition)
            .values(epoch=partition_epochs.c.epoch + 1_000_000)
        )


async def test_a_turn_refused_by_the_epoch_fence_midway_leaves_its_message_staged(
    service: TurnstileService, nc: Client, subjects: Subjects, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    runtime, sid, partition = await _served_session(service, "midway")
    started = await Collector().attach(nc, subjects.event(sid, "turn.started"))
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))

    msg = inbound(sid, "/stall 1\nhello")
    await publish_inbound(nc, subjects, msg)
    await wait_for(lambda: started.messages, timeout_s=30, what="the turn to start")
    await _taken_over(runtime, partition)

    def turn_over() -> bool:
        return any("stays staged" in r.getMessage() or "failed: unavailable" in r.getMessage() for r in caplog.records)

    await wait_for(turn_over, timeout_s=30, what="the turn to end or give the message up")
    assert await runtime.inbox.status_of("cli", msg["id"]) == "staged"  # the new owner replays it
    assert replies.messages == []


async def test_a_message_whose_staging_the_epoch_fence_refuses_stays_staged_not_dropped(
    service: TurnstileService, nc: Client, subjects: Subjects, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same refusal one step earlier: the partition moves after the message entered the inbox and
    # before its user message is journaled. Found on the 3-node cluster in CI (a node SIGKILLed): the
    # refusal was taken for the message's own fault and it was dropped (``message.dropped``, reason
    # ``unavailable``, inbox ``dropped``); the new owner never answered it.
    caplog.set_level(logging.WARNING)
    runtime, sid, partition = await _served_session(service, "staging")
    dropped = await Collector().attach(nc, subjects.event(sid, "message.dropped"))
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    begin = Session.begin_user_turn

    async def taken_over_first(self: Session, *args: Any, **kwargs: Any) -> Any:
        await _taken_over(runtime, partition)  # a newer owner took the partition just now
        return await begin(self, *args, **kwargs)

    monkeypatch.setattr(Session, "begin_user_turn", taken_over_first)
    msg = inbound(sid, "hello")
    await publish_inbound(nc, subjects, msg)

    def given_up() -> bool:
        return bool(dropped.messages) or any("stays staged" in r.getMessage() for r in caplog.records)

    await wait_for(given_up, timeout_s=30, what="the message to be given up or dropped")
    assert [m.data for m in dropped.messages] == []
    assert await runtime.inbox.status_of("cli", msg["id"]) == "staged"  # the new owner replays it
    assert replies.messages == []
