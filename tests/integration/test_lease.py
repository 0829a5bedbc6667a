"""The ownership lease: one holder at a time, hand-over on release or expiry, loss on a stolen lease."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from nats.aio.client import Client

from consumers.lease import LEASE_KEY, OwnershipLease
from tests.integration.harness import wait_for


async def test_one_holder_at_a_time_and_a_standby_takes_over_after_release(nc: Client) -> None:
    bucket = f"L{uuid.uuid4().hex[:8]}"
    js = nc.jetstream()
    first = OwnershipLease(js, bucket, ttl_s=2.0, owner_id="first")
    second = OwnershipLease(js, bucket, ttl_s=2.0, owner_id="second")
    lost: list[str] = []
    await first.acquire(on_lost=lambda: lost.append("first"))
    assert await second.try_acquire() is False
    assert await second.holder() == "first"
    standby = asyncio.create_task(second.acquire(on_lost=lambda: lost.append("second")))
    await wait_for(lambda: second.holder(), what="the standby to be polling")  # a round trip of its own
    assert not standby.done() and not second.held
    await first.release()
    await asyncio.wait_for(standby, 10)
    assert await first.holder() == "second" and lost == []
    await second.release()


async def test_a_holder_whose_lease_was_taken_over_stops_at_once(nc: Client) -> None:
    bucket = f"L{uuid.uuid4().hex[:8]}"
    js = nc.jetstream()
    holder = OwnershipLease(js, bucket, ttl_s=1.5, owner_id="zombie")
    lost: list[str] = []
    await holder.acquire(on_lost=lambda: lost.append("zombie"))
    # Someone else overwrites the key (as after an expiry): the next renewal's compare-and-set fails.
    kv = await js.key_value(bucket)
    await kv.put(LEASE_KEY, b"usurper")
    await wait_for(lambda: lost == ["zombie"], timeout_s=10, what="the holder to notice")
    assert holder.held is False
    await holder.release()
