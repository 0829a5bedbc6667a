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


async def test_a_standby_asking_as_the_holders_key_expires_asks_again(nc: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # nats-py's KeyValue.create, refused, reads the key to tell a deleted one from a held one; when
    # the key expires (max age) between the two, that read raises KeyNotFoundError. A restarted
    # service whose predecessor's lease expired just then exited on it (AttributeError in not_now).
    bucket = f"L{uuid.uuid4().hex[:8]}"
    js = nc.jetstream()
    holder = OwnershipLease(js, bucket, ttl_s=30.0, owner_id="killed")
    standby = OwnershipLease(js, bucket, ttl_s=30.0, owner_id="restarted")
    assert await holder.try_acquire() is True
    kv = await standby._bucket_kv()
    read = kv._get

    async def expiring_read(key: str, *args: object, **kwargs: object) -> object:
        monkeypatch.setattr(kv, "_get", read)
        await js.purge_stream(f"KV_{bucket}", subject=f"$KV.{bucket}.{LEASE_KEY}")  # what the max age does
        return await read(key, *args, **kwargs)

    monkeypatch.setattr(kv, "_get", expiring_read)
    assert await standby._try_acquire_or_wait() is False  # not taken this time, and no exception
    assert await standby._try_acquire_or_wait() is True  # the key is gone: the next ask takes it
    assert await standby.holder() == "restarted"
