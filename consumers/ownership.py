"""Partition ownership: one JetStream KV lease per partition, shared out among the live processes.

Bucket ``<PREFIX>_PARTITIONS`` (TTL ``TURNSTILE_LEASE_TTL_S``, history 1) holds

- ``p.<n>``: the owner of partition ``n`` (value: the owner id). It is taken with ``create``
  (only when absent, expired or deleted) and renewed with a compare-and-set on its revision;
  the revision at which a process took it is that ownership's *epoch*. A process that misses
  renewals for a TTL (SIGKILL, SIGSTOP, cut off) loses the key to expiry and another process
  takes it.
- and in bucket ``<PREFIX>_MEMBERS`` (TTL half the lease TTL), one heartbeat per live process,
  so each knows how many share the work and takes at most ``fair_share(partitions, members)``
  partitions; a process above that releases its highest partitions (a joining process then
  takes them), one below it takes free ones. A dead process's heartbeat expires before its
  partition leases do, so the survivors' share has grown by the time those expire and they
  take them at their next round (failover within the TTL plus one round). A heartbeat that
  lapses while its process lives only delays a release: partitions are taken only when free.

Ownership is also checked locally against the monotonic clock (``owns``): a partition is ours
only while its last successful renewal was sent less than a TTL ago. A process resumed after a
SIGSTOP therefore stops staging and fetching at once, before its renewal even fails; the
broker-side fences stay (checkpoints: ``Nats-Expected-Last-Subject-Sequence``; replies:
``Nats-Msg-Id``), and turns re-read the key (``still_ours``) before they act on a failure. The
epoch is also the SQL write fence: the new owner stores it before its replay and every staging
and journal append carries it (``core/store/partition_epochs.py``).

Why KV leases and not ADR-42's ``pinned_client`` priority groups (see docs/protocol.md#partitioned-ownership):
a pinned client learns it was unpinned only at its next pull (status 423), so a resumed process
cannot tell that its running turns and staged work belong to someone else, nothing names the
owner of a partition for control-request routing, and pinning never moves a partition to
*another* member (orbit.go's pcgroups change membership administratively). The lease gives all
three; the per-partition durable consumers give the delivery.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BadRequestError, KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_delay, wait_exponential

from consumers.lease import new_owner_id
from consumers.partitions import fair_share
from consumers.task_stop import cancel_and_wait

log = logging.getLogger(__name__)

# How often free partitions and the member count are looked at (bounds the takeover delay
# after a lease expires; a sixth of the TTL, at most this).
BALANCE_EVERY_S = 0.5
START_PATIENCE_S = 60.0  # joining: how long the buckets may stay unavailable before start-up fails
MEMBER_TTL_SHARE = 0.5  # the heartbeat's TTL, as a share of the lease TTL
MEMBER_BEATS_PER_TTL = 3  # heartbeats within one heartbeat TTL
# A partition counts as ours locally only while its last renewal was sent less than this share of the TTL ago.
LOCAL_VALIDITY_SHARE = 0.9

Transition = Callable[[list[int]], Awaitable[None]]


@dataclass
class Held:
    """One partition this process holds: the key's current revision, its epoch, when it was last renewed."""

    revision: int
    epoch: int
    renewed_at: float  # monotonic, when the successful create/update was sent


class PartitionOwnership:
    """Take, renew, balance and release the partition leases of one process."""

    def __init__(
        self,
        js: JetStreamContext,
        bucket: str,
        partitions: int,
        ttl_s: float,
        on_gained: Transition,
        on_lost: Transition,
        owner_id: str | None = None,
        max_members: int | None = None,
        replicas: int = 1,
        members_bucket: str | None = None,
    ) -> None:
        self._replicas = replicas
        self._js = js
        self._bucket = bucket
        self.partitions = partitions
        self.ttl_s = ttl_s
        self._on_gained = on_gained
        self._on_lost = on_lost
        self.member = uuid.uuid4().hex[:12]
        self.owner_id = owner_id or f"{new_owner_id()}:{self.member}"
        self._max_members = max_members  # 1 with SQLite: one process owns every partition
        self._kv: KeyValue | None = None
        self._members_kv: KeyValue | None = None
        self._members_bucket = members_bucket or f"{bucket}_MEMBERS"
        self.held: dict[int, Held] = {}
        self._lock = asyncio.Lock()  # one transition at a time
        self._task: asyncio.Task[None] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._member_at = 0.0
        self.members = 1
        self._renewal = asyncio.Event()  # set (and replaced) at every successful renewal

    # -- queries -------------------------------------------------------------------

    def owns(self, partition: int, now: float | None = None) -> bool:
        """Ours now, by the local clock (no I/O): held and renewed less than a TTL ago."""
        held = self.held.get(partition)
        if held is None:
            return False
        now = time.monotonic() if now is None else now
        return now - held.renewed_at < self.ttl_s * LOCAL_VALIDITY_SHARE

    def epoch(self, partition: int) -> int | None:
        held = self.held.get(partition)
        return held.epoch if held is not None else None

    async def still_ours(self, partition: int) -> bool:
        """Read from the bucket now: does ``partition``'s key still name us at our revision?"""
        if not self.owns(partition):
            return False
        try:
            entry = await (await self._bucket_kv()).get(_pkey(partition))
        except NotFoundError:
            return False
        except Exception as exc:
            log.warning("reading the lease of partition %d failed (%r); the local lease decides", partition, exc)
            return self.owns(partition)
        return entry.value == self.owner_id.encode()

    async def names_us(self, partition: int) -> bool:
        """Read from the bucket now: does ``partition``'s key name this process (whatever its revision)?"""
        return await self.owner_of(partition) == self.owner_id

    def forget(self, partition: int) -> None:
        """Drop a partition taken but overtaken by a newer owner before it was used (no release)."""
        self.held.pop(partition, None)

    async def renewed(self) -> None:
        """Return at the next successful renewal of a held lease (a lapsed local lease may be ours again)."""
        await self._renewal.wait()

    async def owner_of(self, partition: int) -> str | None:
        """The owner id named by ``partition``'s key (None: nobody holds it now)."""
        try:
            entry = await (await self._bucket_kv()).get(_pkey(partition))
        except Exception:
            return None
        return entry.value.decode() if entry.value else None

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Join: heartbeat, take a first share (``on_gained`` runs before this returns), keep balancing."""
        # Renewals run on their own task: a long transition (a takeover's recovery) never delays them.
        self._renewer = asyncio.create_task(self._renew_loop(), name="partition-renewal")
        # A cluster that just created the buckets may not have elected their leaders yet.
        async for attempt in AsyncRetrying(
            wait=wait_exponential(multiplier=0.1, max=2.0), stop=stop_after_delay(START_PATIENCE_S), reraise=True,
            retry=retry_if_exception_type(Exception), before_sleep=_log_join_retry,
        ):
            with attempt:
                await self._heartbeat()
        try:
            await self._balance()
        except Exception as exc:  # the balancing loop tries again
            log.warning("taking a first share of the partitions failed (%r); retrying", exc)
        self._task = asyncio.create_task(self._run(), name="partition-ownership")

    async def stop_balancing(self) -> None:
        """Shutdown, first step: take and release nothing more; the held leases stay renewed while
        the caller drains its running turns (they must not expire under it)."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def stop(self) -> None:
        """Stop balancing and renewing; the caller then releases (``release_all``) once its work is flushed."""
        for task in (self._task, self._renewer):
            if task is not None:
                await cancel_and_wait(task)
        self._task = self._renewer = None

    async def release_all(self) -> None:
        """Leave: delete every held key (another process takes them at once) and the heartbeat."""
        kv = await self._bucket_kv()
        for partition, held in sorted(self.held.items()):
            await _quietly(kv.delete(_pkey(partition), last=held.revision))
        self.held.clear()
        await _quietly(self._js.purge_stream(f"KV_{self._members_bucket}", subject=self._mkey_subject(self.member)))

    # -- the loop -------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(min(BALANCE_EVERY_S, self.ttl_s / 6))
            try:
                await self._balance()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("partition balancing round failed: %r", exc)

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(min(self._cadence_s() / 2, self._beat_s() / 2, BALANCE_EVERY_S))
            try:
                await self._renew()
                if time.monotonic() - self._member_at >= self._beat_s():
                    await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("partition renewal round failed: %r", exc)

    def _beat_s(self) -> float:
        return self.ttl_s * MEMBER_TTL_SHARE / MEMBER_BEATS_PER_TTL

    def _cadence_s(self) -> float:
        return min(self.ttl_s / 3, BALANCE_EVERY_S * 2)

    async def _renew(self) -> None:
        kv = await self._bucket_kv()
        lost: list[int] = []
        for partition, held in list(self.held.items()):
            now = time.monotonic()
            if not self.owns(partition, now):
                lost.append(partition)  # paused or cut off past the TTL: someone else may hold it
                continue
            if now - held.renewed_at < self._cadence_s():
                continue
            try:
                async with asyncio.timeout(self._cadence_s()):  # not wait_for: it can lose a cancel (task_stop.py)
                    held.revision = await kv.update(_pkey(partition), self.owner_id.encode(), last=held.revision)
                held.renewed_at = now
                self._renewal.set()
                self._renewal = asyncio.Event()
            except KeyWrongLastSequenceError:
                lost.append(partition)
            except (TimeoutError, Exception) as exc:  # the local validity decides later
                log.warning("renewing partition %d failed (%r); retrying", partition, exc)
        if lost:
            await self._lose(lost, "lease lost (expired or taken)")

    async def _heartbeat(self) -> None:
        kv = await self._members()
        now = time.monotonic()
        await kv.put(f"m.{self.member}", self.owner_id.encode())
        self._member_at = now

    async def _count_members(self) -> int:
        info = await self._js.stream_info(f"KV_{self._members_bucket}", subjects_filter=self._mkey_subject("*"))
        count = len(info.state.subjects or {}) if info.state is not None else 0
        return max(count, 1)

    async def _balance(self) -> None:
        self.members = await self._count_members()
        if self._max_members is not None:
            self.members = min(self.members, self._max_members)
        share = fair_share(self.partitions, self.members)
        if len(self.held) > share:
            extra = sorted(self.held)[share:]
            await self._release(extra)
            return
        if len(self.held) >= share:
            return
        kv = await self._bucket_kv()
        gained: list[int] = []
        # Start at a member-dependent offset so joiners do not all race for the same keys.
        offset = int(self.member, 16) % self.partitions
        for i in range(self.partitions):
            if len(self.held) + len(gained) >= share:
                break
            partition = (offset + i) % self.partitions
            if partition in self.held:
                continue
            sent = time.monotonic()
            try:
                revision = await kv.create(_pkey(partition), self.owner_id.encode())
            except (KeyWrongLastSequenceError, BadRequestError):
                continue  # held by another process
            except KeyNotFoundError:
                continue  # its holder's key expired while ``create`` read it: free, taken next round
            self.held[partition] = Held(revision, revision, sent)
            gained.append(partition)
        if gained:
            log.info("took partitions %s (%d members, share %d)", gained, self.members, share)
            async with self._lock:
                await self._on_gained(sorted(gained))

    async def _release(self, partitions: list[int]) -> None:
        """Hand partitions over: stop their work first, then delete their keys."""
        log.info("releasing partitions %s (%d members, share %d)", partitions, self.members,
                 fair_share(self.partitions, self.members))
        async with self._lock:
            await self._on_lost(partitions)
        kv = await self._bucket_kv()
        for partition in partitions:
            held = self.held.pop(partition, None)
            if held is not None:
                await _quietly(kv.delete(_pkey(partition), last=held.revision))

    async def _lose(self, partitions: list[int], reason: str) -> None:
        log.warning("fenced: partitions %s %s; their work stops here", partitions, reason)
        for partition in partitions:
            self.held.pop(partition, None)
        async with self._lock:
            await self._on_lost(partitions)

    # -- the bucket -------------------------------------------------------------------

    def _mkey_subject(self, member: str) -> str:
        return f"$KV.{self._members_bucket}.m.{member}"

    async def _members(self) -> KeyValue:
        if self._members_kv is None:
            self._members_kv = await self._open(self._members_bucket, self.ttl_s * MEMBER_TTL_SHARE)
        return self._members_kv

    async def _open(self, bucket: str, ttl_s: float) -> KeyValue:
        config = KeyValueConfig(bucket=bucket, ttl=ttl_s, history=1, storage=StorageType.FILE, replicas=self._replicas)
        try:
            return await self._js.create_key_value(config)
        except BadRequestError:
            return await self._js.key_value(bucket)

    async def _bucket_kv(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self._open(self._bucket, self.ttl_s)
        return self._kv


def _log_join_retry(state: RetryCallState) -> None:
    outcome = state.outcome
    log.warning("joining the partition members: the bucket did not answer (attempt %d: %r); retrying",
                state.attempt_number, outcome.exception() if outcome is not None else None)


def _pkey(partition: int) -> str:
    return f"p.{partition}"


async def _quietly(aw: Awaitable[object]) -> None:
    try:
        await aw
    except Exception as exc:
        log.debug("ownership bookkeeping failed: %r", exc)
