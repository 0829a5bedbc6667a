"""10.1: messages a killed process fetched but never staged are answered before later ones (MQ-1)."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest
from nats.aio.client import Client

from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for
from tests.integration.lifecycle_procs import (
    ConfiguredProcess,
    consumer_settled,
    outbound_count,
    stored_replies_by_session,
)

SESSIONS = 8


@pytest.mark.rule("MQ-1", "MQ-8")
@pytest.mark.timeout(150)
async def test_fetched_but_unstaged_messages_of_a_killed_process_keep_their_session_order(
    settings: Settings, tmp_path: Path, nc: Client, subjects: Subjects
) -> None:
    # An ack wait well beyond the restart time: JetStream alone would redeliver the stalled
    # messages only after the restarted process has answered the later ones.
    proc = ConfiguredProcess(settings, tmp_path / "service.log", TURNSTILE_ACK_WAIT_S="15")
    sids = [f"order-{i}-{uuid.uuid4().hex[:4]}" for i in range(SESSIONS)]
    replies = await Collector().attach(nc, subjects.outbound_all)
    published: dict[str, list[str]] = {sid: [] for sid in sids}

    async def publish_round(tag: str) -> None:
        for sid in sids:
            body = inbound(sid, f"{tag} {sid}")
            published[sid].append(body["id"])
            await publish_inbound(nc, subjects, body)

    try:
        await proc.start()
        await proc.wait_ready(nc)
        await publish_round("warm")
        await wait_for(lambda: len(replies.messages) == SESSIONS, timeout_s=30, what="the warm-up replies")

        # The scripted stall: the database is locked, so the process fetches but cannot stage.
        db_path = settings.database_url.split("///", 1)[1]
        lock = sqlite3.connect(db_path, timeout=30, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")
        try:
            await publish_round("a1")
            await publish_round("a2")
            info_ok = lambda: _all_fetched_none_acked(nc, subjects, settings.consumer_name, 2 * SESSIONS)  # noqa: E731
            await wait_for(info_ok, timeout_s=60, what="the stalled process to hold every new message unacked")
            await proc.kill()
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        assert len(replies.messages) == SESSIONS

        await publish_round("b1")
        await publish_round("b2")
        await proc.start()
        total = 5 * SESSIONS
        await wait_for(lambda: _stored(nc, subjects, total), timeout_s=60, what="every reply after the restart")
        assert await stored_replies_by_session(nc, subjects) == published
        # JetStream's later redelivery of the recovered messages is recognised and acked, not answered again.
        await wait_for(lambda: consumer_settled(nc, subjects, settings.consumer_name), timeout_s=60,
                       what="the redeliveries to be acked")
        assert await outbound_count(nc, subjects) == total
        assert {r["reply_to"] for r in replies.json()} == {i for ids in published.values() for i in ids}
    finally:
        await proc.stop()


async def _stored(nc: Client, subjects: Subjects, n: int) -> bool:
    return await outbound_count(nc, subjects) >= n


async def _all_fetched_none_acked(nc: Client, subjects: Subjects, consumer: str, n: int) -> bool:
    """Every message published so far was delivered at least once, and none of the last ``n`` acked."""
    js = nc.jetstream()
    last = (await js.stream_info(subjects.inbound_stream)).state.last_seq
    info = await js.consumer_info(subjects.inbound_stream, consumer)
    return bool(info.delivered.stream_seq == last and info.ack_floor.stream_seq == last - n)
