"""A partition whose local lease lapsed (renewals stall, e.g. during a NATS leader election) takes no
messages while it is handed over, and loses none.

Found on the 3-node cluster (tests/integration/test_partitioned_cluster.py, a node SIGKILLed): the fetch
loops of partitions in doubt went on fetching and nacking at once, so within seconds messages reached
MaxDeliver; the MAX_DELIVERIES advisory was then served through the same fenced loop, which nacked a
message read from the stream — a no-op — and the message was never answered. Driven here on one server
with SQLite (one process owns every partition) and ``max_deliver=1``, the lapse set by hand (the
ownership then hands the partition over and takes it again once its key expires). The advisory's read
waiting for the partition: tests/unit/test_inbound_fence.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from nats.aio.client import Client

from consumers.nats_server import NatsServer
from consumers.ownership import PartitionOwnership
from consumers.partitioned import PartitionedInbound
from consumers.partitions import partition_consumer
from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, wait_for

pytestmark = [pytest.mark.timeout(90), pytest.mark.rule("MQ-8")]


@pytest.fixture
def settings(nats_server: NatsServer, tmp_path: Path) -> Settings:
    # One delivery allowed: a message delivered and not staged is given up at once (MAX_DELIVERIES).
    return Settings(
        nats_url=nats_server.url,
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'turnstile.db'}",
        prefix="t" + uuid.uuid4().hex[:8],
        fetch_timeout_s=0.2,
        ack_wait_s=1.0,
        max_deliver=1,
        partitions=4,
        lease_ttl_s=1.5,  # the lapse, the hand-over and the retake take seconds, not tens of them
    )


class Doubt:
    """Makes one partition's local lease look lapsed while ``on``, and counts the looks."""

    def __init__(self, ownership: PartitionOwnership, partition: int, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = False
        self.looked = 0
        owns = ownership.owns

        def doubted_owns(part: int, now: float | None = None) -> bool:
            if part != partition:
                return owns(part, now)
            self.looked += 1
            return not self.on and owns(part, now)

        monkeypatch.setattr(ownership, "owns", doubted_owns)


async def _fetching_stopped(
    nc: Client, settings: Settings, subjects: Subjects, partition: int, doubt: Doubt
) -> None:
    """Once doubt is set: the loop looks at its fence instead of fetching, and its last pull request
    has expired (a request sent before the doubt would still take a message)."""
    looked = doubt.looked
    await wait_for(lambda: doubt.looked >= looked + 2, timeout_s=30, what="the fetch loop to wait on its fence")
    js = nc.jetstream()
    consumer = partition_consumer(settings.consumer_name, partition)

    async def no_pull_waiting() -> bool:
        return (await js.consumer_info(subjects.inbound_stream, consumer)).num_waiting == 0

    await wait_for(no_pull_waiting, timeout_s=30, what="its pull requests to expire")


async def _partition_served(service: TurnstileService, sid: str) -> tuple[PartitionedInbound, int]:
    runtime = service.runtime
    assert runtime is not None and runtime.partitioned is not None
    parts = runtime.partitioned
    partition = parts.partition_of(sid)
    await wait_for(lambda: partition in parts.loops, timeout_s=30, what="the partition to be taken")
    return parts, partition


async def test_a_partition_in_doubt_fetches_nothing_and_its_message_is_answered_once_it_is_ours_again(
    service: TurnstileService, settings: Settings, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = f"doubt-{uuid.uuid4().hex[:6]}"
    parts, partition = await _partition_served(service, sid)
    doubt = Doubt(parts.ownership, partition, monkeypatch)
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))

    doubt.on = True
    await _fetching_stopped(nc, settings, subjects, partition, doubt)
    await publish_inbound(nc, subjects, inbound(sid, "hello"))
    looked = doubt.looked
    await wait_for(lambda: doubt.looked >= looked + 10, timeout_s=30, what="the loop to look at its fence again")
    doubt.on = False

    await wait_for(lambda: replies.messages, timeout_s=60, what="the reply")
    info = await nc.jetstream().consumer_info(
        subjects.inbound_stream, partition_consumer(settings.consumer_name, partition)
    )
    assert info.delivered is not None and info.delivered.consumer_seq == 1  # delivered once: nothing burned
    assert [r["text"] for r in replies.json()] == ["echo: hello"]
