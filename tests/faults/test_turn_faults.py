"""Faults inside one message's life: a turn longer than 3× the ack wait, a delivery that hits MaxDeliver, a
session id too long for a subject, bad input among good."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from nats.aio.msg import Msg

from tests.faults.load import check
from tests.faults.rig import FaultRig
from tests.integration.harness import api, wait_for
from tests.soak.driver import read_facts

pytestmark = pytest.mark.timeout(180)

ACK_WAIT_S = 1.0


async def test_a_turn_longer_than_three_ack_waits_is_not_redelivered(
    tmp_path: Path, fault_row: Callable[..., None]
) -> None:
    stall_s = 3.5 * ACK_WAIT_S
    async with FaultRig(tmp_path, env={"TURNSTILE_ACK_WAIT_S": str(ACK_WAIT_S)}) as rig:
        sid = "long-turn"
        await rig.publish(sid, 0, f"/stall {stall_s}\n")
        for i in range(1, 4):  # queued behind the long turn, held (and heartbeated) meanwhile
            await rig.publish(sid, i)
        await rig.publish("other", 0, f"/stall {stall_s}\n")
        rig.fault_ended()
        report, _ = await rig.settle()
        info = await rig.client.jetstream().consumer_info(rig.subjects.inbound_stream, "turnstile-inbound")
        assert info.num_redelivered == 0, info
        check(rig, report, fault_row, f"turn of {stall_s:.1f} s with a {ACK_WAIT_S:.0f} s ack wait")


async def _steal_delivery(rig: FaultRig) -> int:
    """Fetch the next inbound message from the service's durable consumer and never ack it."""
    js = rig.client.jetstream()
    psub = await js.pull_subscribe_bind("turnstile-inbound", rig.subjects.inbound_stream)
    msgs: list[Msg] = await psub.fetch(1, timeout=5)
    await psub.unsubscribe()
    return int(msgs[0].metadata.sequence.stream)


async def test_a_message_that_reaches_max_deliver_is_still_answered(
    tmp_path: Path, fault_row: Callable[..., None]
) -> None:
    # One delivery allowed, a 1 s ack wait; a lease long enough that the pause below does not change the owner
    # (a takeover would recover the in-flight range and hide the fault).
    env = {"TURNSTILE_MAX_DELIVER": "1", "TURNSTILE_ACK_WAIT_S": str(ACK_WAIT_S), "TURNSTILE_LEASE_TTL_S": "30"}
    async with FaultRig(tmp_path, env=env, drain_bound_s=20.0) as rig:
        advisories: list[dict[str, object]] = []

        async def on_advisory(msg: Msg) -> None:
            advisories.append(orjson.loads(msg.data))

        await rig.client.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>", cb=on_advisory)
        await rig.publish("md", 0)
        await wait_for(lambda: rig.probe(), timeout_s=30, what="the service serving")
        # The service is paused while its delivery is taken and never acked (as when a fetched batch is lost
        # with a dying connection, or a process dies again and again before staging it).
        rig.proc.pause()
        try:
            await asyncio.sleep(0.5)  # its outstanding pull requests (0.2 s) expire; pacing, not a condition
            lost = await rig.publish("md", 1)
            assert lost is not None
            assert await _steal_delivery(rig) == lost.inbound_seq
            await wait_for(lambda: advisories, timeout_s=10, what="the MAX_DELIVERIES advisory")
        finally:
            rig.proc.resume()
        rig.fault_ended()
        await rig.publish("md", 2)
        report, _ = await rig.settle()
        check(rig, report, fault_row, "a delivery that reaches MaxDeliver (advisory), service up all along")
        assert "max deliveries" in rig.proc.log_text()


@pytest.mark.faults_long  # the refusals themselves are tested in tests/integration (subject limits, DLQ bounds)
async def test_session_ids_too_long_and_bad_input_are_dead_lettered_with_their_code(
    tmp_path: Path, fault_row: Callable[..., None]
) -> None:
    async with FaultRig(tmp_path) as rig:
        long_sid = "s" * 600  # over the 512-byte bound, its subject still under the server's control line
        bad = await rig.publish(long_sid, 0)
        for i in range(3):
            await rig.publish("good", i)
        js = rig.client.jetstream()
        await js.publish(rig.subjects.inbound("cli", "good"), b"{not json", headers={"Nats-Msg-Id": "raw-1"})
        got = await api(rig.client, rig.subjects, "session", "create", {"session_id": "x" * 5000, "platform": "cli"})
        assert got["ok"] is False and got["error"]["code"] == "invalid", got
        rig.fault_ended()
        report, _ = await rig.settle()
        facts = await read_facts(rig.client, rig.subjects)
        codes = sorted(d.body["error"]["code"] for d in facts.dead_letters)
        assert codes == ["bad_json", "invalid"], codes
        assert bad is not None and rig.client.is_connected
        check(rig, report, fault_row, "session id of 600 bytes, a 5000-byte id over the API, bad JSON")

