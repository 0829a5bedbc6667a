"""The inbound stream's partition transform: NATS files each session where ``partition_of`` says."""

from __future__ import annotations

import uuid

import orjson
import pytest
from nats.aio.client import Client

from consumers.inbound_decoding import decode_inbound
from consumers.partitions import fair_share, partition_of, stored_partition
from consumers.settings import Settings
from consumers.startup import StartupError
from consumers.streams import ensure_streams
from schemas.subjects import Subjects
from schemas.wire import InboundMessage
from tests.integration.harness import inbound


async def test_the_broker_files_every_session_under_the_partition_python_computes(
    settings: Settings, nc: Client, subjects: Subjects
) -> None:
    partitioned = settings.model_copy(update={"partitions": 16})
    js = nc.jetstream()
    await ensure_streams(js, partitioned, subjects)
    sids = [f"s-{uuid.uuid4().hex[:8]}" for _ in range(60)] + ["a.b", "über", "_", "x y"]
    for sid in sids:
        await js.publish(subjects.inbound("cli", sid), orjson.dumps(inbound(sid, "hi")))
    seen = set()
    for seq in range(1, len(sids) + 1):
        raw = await js.get_msg(subjects.inbound_stream, seq)
        assert raw.subject is not None and raw.data is not None
        decoded = decode_inbound(settings.prefix, raw.subject, raw.data, 1 << 20)
        assert isinstance(decoded, InboundMessage), decoded
        assert stored_partition(settings.prefix, raw.subject) == partition_of(decoded.session_id, 16)
        seen.add(stored_partition(settings.prefix, raw.subject))
    assert len(seen) > 8  # spread over the partitions


async def test_a_malformed_inbound_subject_is_stored_untransformed_for_the_catch_all_partition(
    settings: Settings, nc: Client, subjects: Subjects
) -> None:
    partitioned = settings.model_copy(update={"partitions": 4})
    js = nc.jetstream()
    await ensure_streams(js, partitioned, subjects)
    await js.publish(f"{settings.prefix}.inbound.cli", b"{}")
    info = await js.consumer_info(subjects.inbound_stream, f"{settings.consumer_name}-p0")
    assert info.num_pending == 1
    info = await js.consumer_info(subjects.inbound_stream, f"{settings.consumer_name}-p1")
    assert info.num_pending == 0


async def test_a_different_partition_count_than_the_stream_was_created_with_is_refused(
    settings: Settings, nc: Client, subjects: Subjects
) -> None:
    js = nc.jetstream()
    await ensure_streams(js, settings.model_copy(update={"partitions": 4}), subjects)
    await ensure_streams(js, settings.model_copy(update={"partitions": 4}), subjects)  # the same: fine
    for other in (1, 8):
        with pytest.raises(StartupError, match="fixed at creation"):
            await ensure_streams(js, settings.model_copy(update={"partitions": other}), subjects)


def test_every_partition_is_covered_by_the_fair_shares() -> None:
    for partitions in (1, 2, 7, 16, 64):
        for members in range(1, 10):
            assert fair_share(partitions, members) * members >= partitions
            assert fair_share(partitions, members) - partitions / members < 1
