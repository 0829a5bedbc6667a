"""The broker's state goes wrong under the service: the JetStream store full, the inbound stream full, the
durable inbound consumer deleted."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from nats.js.api import DiscardPolicy, StreamConfig
from nats.js.errors import APIError

from tests.faults.load import check, sessions
from tests.faults.rig import FaultRig
from tests.integration.harness import wait_for

pytestmark = pytest.mark.timeout(240)

STORE_BYTES = 4 * 1024 * 1024
FILLER = b"x" * (256 * 1024)


async def _fill(rig: FaultRig, name: str) -> int:
    """Fill the JetStream store with a stream of the test's own until the broker refuses; bytes stored."""
    js = rig.client.jetstream()
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    stored = 0
    while True:
        try:
            await js.publish(f"{name}.x", FILLER, timeout=5)
        except APIError:
            return stored
        stored += len(FILLER)


async def test_the_jetstream_store_full(tmp_path: Path, fault_row: Callable[..., None]) -> None:
    config = tmp_path / "nats.conf"
    config.write_text(f"jetstream {{\n  max_file_store: {STORE_BYTES}\n}}\n")
    async with FaultRig(tmp_path, server_config=config) as rig:
        sids = sessions(4, "full")
        for sid in sids:  # accepted while there is room; their turns run into the full store
            await rig.publish(sid, 0, "/stall 1.5\n")
        await _fill(rig, "FILLER")
        # What a publisher sees while the store is full: a refusal (not accepted, so not owed an answer).
        refused_before = len(rig.refused)
        assert await rig.publish(sids[0], 1) is None
        assert "insufficient" in rig.refused[refused_before].lower(), rig.refused
        await asyncio.sleep(4.0)  # the fault's length: the turns' checkpoints and replies are refused meanwhile
        await rig.client.jetstream().delete_stream("FILLER")
        rig.fault_ended()
        for sid in sids:
            await rig.publish(sid, 2)
        report, _ = await rig.settle()
        assert rig.proc.running
        check(rig, report, fault_row, f"JetStream store full ({STORE_BYTES // 1024 // 1024} MB) for 4 s mid-turn")


async def test_the_inbound_stream_full(tmp_path: Path, fault_row: Callable[..., None]) -> None:
    async with FaultRig(tmp_path) as rig:
        js = rig.client.jetstream()
        for i in range(3):
            await rig.publish("sf", i)
        info = await js.stream_info(rig.subjects.inbound_stream)
        # An operator caps the inbound stream (discard new): the next publishes are refused.
        capped = info.config
        capped.max_msgs = info.state.messages + 2
        capped.discard = DiscardPolicy.NEW
        await js.update_stream(capped)
        accepted = [await rig.publish("sf", i) for i in range(3, 8)]
        assert [a is not None for a in accepted] == [True, True, False, False, False], rig.refused
        assert all("maximum messages exceeded" in r for r in rig.refused), rig.refused
        capped.max_msgs = -1
        await js.update_stream(capped)
        rig.fault_ended()
        for i in range(8, 10):
            await rig.publish("sf", i)
        report, _ = await rig.settle()
        check(rig, report, fault_row, "inbound stream capped (max_msgs, discard new): 3 of 10 refused")


@pytest.mark.faults_long
async def test_the_inbound_consumer_deleted_under_load(tmp_path: Path, fault_row: Callable[..., None]) -> None:
    async with FaultRig(tmp_path) as rig:
        load = asyncio.create_task(rig.load(sessions(5, "cd"), 8, rate_per_s=15.0))
        await wait_for(lambda: len(rig.record.published) >= 10, timeout_s=30, what="some load first")
        await rig.client.jetstream().delete_consumer(rig.subjects.inbound_stream, "turnstile-inbound")
        rig.fault_ended()
        await load
        report, _ = await rig.settle()
        assert "recreating" in rig.proc.log_text()
        check(rig, report, fault_row, "durable inbound consumer deleted under load")
