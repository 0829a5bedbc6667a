"""Releasing the lease while a renewal is in flight still hands ownership over at once (MQ-2)."""

from __future__ import annotations

import uuid

from nats.aio.client import Client

from consumers.lease import LEASE_KEY, OwnershipLease


async def test_release_deletes_the_lease_when_a_cancelled_renewal_already_moved_its_revision(nc: Client) -> None:
    bucket = f"L{uuid.uuid4().hex[:8]}"
    js = nc.jetstream()
    lease = OwnershipLease(js, bucket, ttl_s=30.0, owner_id="me")
    await lease.acquire(on_lost=lambda: None)
    # A renewal the server applied but whose answer never arrived (cancelled by release).
    kv = await js.key_value(bucket)
    entry = await kv.get(LEASE_KEY)
    await kv.update(LEASE_KEY, b"me", last=entry.revision)
    await lease.release()
    assert await lease.holder() is None
    assert await OwnershipLease(js, bucket, ttl_s=30.0, owner_id="next").try_acquire()


async def test_release_leaves_another_holders_lease_alone(nc: Client) -> None:
    bucket = f"L{uuid.uuid4().hex[:8]}"
    js = nc.jetstream()
    lease = OwnershipLease(js, bucket, ttl_s=30.0, owner_id="me")
    await lease.acquire(on_lost=lambda: None)
    kv = await js.key_value(bucket)
    await kv.put(LEASE_KEY, b"other")
    await lease.release()
    assert await lease.holder() == "other"
