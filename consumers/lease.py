"""The ownership lease: at most one turnstile process per prefix consumes and runs turns.

A JetStream key-value entry (bucket ``<PREFIX>_LEASES``, key ``owner``) with a
TTL is the lease. ``acquire`` creates it (waiting while another process holds
it: hot standby); a background task renews it every third of the TTL with a
compare-and-set on its revision. If a renewal fails (the broker is gone long
enough, or the process was paused past the TTL and someone else took over),
``on_lost`` fires so the process stops working at once. Checkpoint publishes
are fenced separately (``Nats-Expected-Last-Subject-Sequence``), so even a
zombie that has not noticed yet cannot overwrite the new owner's state, and
outbound ``Nats-Msg-Id`` dedup keeps a resumed turn from answering twice.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BadRequestError, KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

from consumers.connect import not_now
from consumers.task_stop import cancel_and_wait

log = logging.getLogger(__name__)

LEASE_KEY = "owner"


def new_owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class OwnershipLease:
    """Acquire, hold and release the single-owner lease of one prefix."""

    def __init__(self, js: JetStreamContext, bucket: str, ttl_s: float, owner_id: str | None = None) -> None:
        self._js = js
        self._bucket = bucket
        self.ttl_s = ttl_s
        self.owner_id = owner_id or new_owner_id()
        self._kv: KeyValue | None = None
        self._revision: int | None = None
        self._renewer: asyncio.Task[None] | None = None

    @property
    def held(self) -> bool:
        return self._revision is not None

    async def _bucket_kv(self) -> KeyValue:
        if self._kv is None:
            config = KeyValueConfig(bucket=self._bucket, ttl=self.ttl_s, history=1, storage=StorageType.FILE)
            try:
                self._kv = await self._js.create_key_value(config)
            except BadRequestError:
                self._kv = await self._js.key_value(self._bucket)
        return self._kv

    async def try_acquire(self) -> bool:
        """Take the lease if nobody holds it; True on success."""
        kv = await self._bucket_kv()
        try:
            self._revision = await kv.create(LEASE_KEY, self.owner_id.encode())
        except KeyWrongLastSequenceError:
            return False
        except KeyNotFoundError:
            # Refused, ``create`` reads the key to tell a deleted one from a held one; it expired
            # (the bucket's max age) between the two: nobody holds it now, the next ask takes it.
            return False
        return True

    async def acquire(self, on_lost: Callable[[], None], poll_s: float | None = None) -> None:
        """Wait until the lease is ours (hot standby), then keep renewing it in the background."""
        poll = poll_s if poll_s is not None else max(self.ttl_s / 4, 0.05)
        waited = False
        while not await self._try_acquire_or_wait():
            if not waited:
                holder = await self.holder()
                log.info("lease held by %s; standing by", holder)
                waited = True
            await asyncio.sleep(poll)
        log.info("lease acquired by %s", self.owner_id)
        self._renewer = asyncio.create_task(self._renew(on_lost), name="lease-renewal")

    async def _try_acquire_or_wait(self) -> bool:
        """``try_acquire``; False (stand by, ask again) when the broker cannot answer now, e.g. a
        cluster electing the bucket's leader: a standby never exits for that."""
        try:
            return await self.try_acquire()
        except Exception as exc:
            if not not_now(exc):
                raise
            log.warning("taking the lease: the broker did not answer (%r); asking again", exc)
            return False

    async def still_ours(self) -> bool:
        """Whether this process still holds the lease, read from the bucket now (not from memory).

        False once the lease was lost or the bucket names another holder (or none: it expired);
        True when the bucket cannot be read (the renewal decides then, and checkpoints stay fenced).
        """
        if self._revision is None:
            return False
        try:
            kv = await self._bucket_kv()
            entry = await kv.get(LEASE_KEY)
        except NotFoundError:  # deleted or expired: nobody holds it, so not we
            return False
        except Exception as exc:
            log.warning("reading the ownership lease failed (%r); assuming it is still ours", exc)
            return True
        return entry.value == self.owner_id.encode()

    async def holder(self) -> str | None:
        kv = await self._bucket_kv()
        try:
            entry = await kv.get(LEASE_KEY)
        except Exception:
            return None
        return entry.value.decode() if entry.value else None

    async def _renew(self, on_lost: Callable[[], None]) -> None:
        interval = self.ttl_s / 3
        kv = await self._bucket_kv()
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            try:
                async with asyncio.timeout(interval):  # not wait_for: it can lose a cancel (task_stop.py)
                    self._revision = await kv.update(LEASE_KEY, self.owner_id.encode(), last=self._revision)
                last_ok = time.monotonic()
                continue
            except asyncio.CancelledError:
                raise
            except KeyWrongLastSequenceError as exc:
                reason = f"another process holds it now ({exc!r})"
            except Exception as exc:
                # A slow or briefly unreachable broker: keep trying while the lease can still be ours.
                if time.monotonic() - last_ok < self.ttl_s - interval:
                    log.warning("renewing the ownership lease failed (%r); retrying", exc)
                    continue
                reason = f"not renewed within its TTL ({exc!r})"
            log.error("lost the ownership lease: %s; stopping work", reason)
            self._revision = None
            on_lost()
            return

    async def release(self) -> None:
        """Stop renewing and delete the lease so a standby takes over at once."""
        if self._renewer is not None:
            await cancel_and_wait(self._renewer)
            self._renewer = None
        if self._revision is not None and self._kv is not None:
            try:
                await self._delete_if_ours(self._kv, self._revision)
            except Exception as exc:
                log.warning("releasing the lease: %r", exc)
        self._revision = None

    async def _delete_if_ours(self, kv: KeyValue, revision: int) -> None:
        try:
            await kv.delete(LEASE_KEY, last=revision)
        except BadRequestError:
            # A renewal cancelled by release() may have been applied without us seeing its
            # revision: delete at the current one if the lease is still ours.
            entry = await kv.get(LEASE_KEY)
            if entry.value == self.owner_id.encode() and entry.revision is not None:
                await kv.delete(LEASE_KEY, last=entry.revision)
