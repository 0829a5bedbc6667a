"""A JetStream stream's leader on a cluster: who it is, and asking it to step down."""

from __future__ import annotations

import nats
import orjson
from nats.aio.client import Client

from tests.waiting import wait_for


async def leader_of(nc: Client, stream: str) -> str | None:
    try:
        info = await nc.jetstream(timeout=2).stream_info(stream)
    except (nats.errors.Error, nats.js.errors.Error):
        return None  # electing
    return info.cluster.leader if info.cluster is not None else None


async def step_down(nc: Client, stream: str) -> None:
    """Ask the stream's leader to step down, and wait until another node leads it."""
    old = await wait_for(lambda: leader_of(nc, stream), timeout_s=30, what="a stream leader")

    async def stepped_down() -> bool:
        try:
            answer = await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", b"", timeout=2)
        except nats.errors.Error:
            return False
        return bool(orjson.loads(answer.data).get("success"))

    await wait_for(stepped_down, timeout_s=30, interval_s=0.1, what="the step-down to be accepted")

    async def new_leader() -> bool:
        leader = await leader_of(nc, stream)
        return leader is not None and leader != old

    await wait_for(new_leader, timeout_s=30, what="another node to lead the stream")
