"""MQ-6: a client replays a session's events and checkpoints from the start, a sequence or a time."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from nats.aio.client import Client

from consumers.replay import replay
from consumers.service import TurnstileService
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for


@pytest.mark.rule("MQ-6")
async def test_events_and_checkpoints_replay_from_start_sequence_and_time(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"replay-{uuid.uuid4().hex[:6]}"
    other = f"other-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, f"{subjects.prefix}.outbound.cli.>")
    await publish_inbound(nc, subjects, inbound(sid, "one"))
    await publish_inbound(nc, subjects, inbound(other, "noise"))
    await wait_for(lambda: len(replies.messages) >= 2, what="first replies")
    assert service.actors is not None
    await service.actors.join(timeout_s=10)
    middle = datetime.now(UTC)
    await publish_inbound(nc, subjects, inbound(sid, "two"))
    await wait_for(lambda: len(replies.messages) >= 3, what="second reply")
    await service.actors.join(timeout_s=10)
    js = nc.jetstream()

    events = [e async for e in replay(js, subjects, sid, "events")]
    assert events and all(e.data["session_id"] == sid for e in events)
    assert [e.data["type"] for e in events].count("turn.ended") == 2
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs)

    from_seq = [e async for e in replay(js, subjects, sid, "events", start_seq=seqs[3])]
    assert [e.seq for e in from_seq] == seqs[3:]

    since = [e async for e in replay(js, subjects, sid, "events", start_time=middle)]
    assert [e.data["type"] for e in since].count("turn.ended") == 1
    assert all(e.seq > seqs[0] for e in since)

    checkpoints = [c async for c in replay(js, subjects, sid, "checkpoints")]
    assert checkpoints and all(c.data["session_id"] == sid for c in checkpoints)
    # The last checkpoint restores the session: its chatend text holds both exchanges.
    last = checkpoints[-1].data["snapshot"]
    assert "two" in last["chatend_text"] and "one" in last["chatend_text"]
