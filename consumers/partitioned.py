"""Partitioned consumption: the inbound loops, replays and actors of the partitions this process owns.

``PartitionOwnership`` (consumers/ownership.py) decides which partitions are ours; this module
acts on its transitions:

- gained: record each partition's epoch in the database (``core/store/partition_epochs.py``: from
  then on the previous owner's staging and journal appends are refused), read the session records
  again (another process wrote them), replay the partitions' staged-but-unfinished inbox rows to their actors in staging order, then start
  one fetch loop per partition on its durable consumer, which first recovers the consumer's in-flight
  range (fetched by a dead owner, never staged) in stream order, once the partition is ours (a loop
  started while the local lease looks lapsed waits for it);
- lost or handed over: stop the partitions' fetch loops at once (what is in flight is nacked or
  redelivered), then stop their sessions' actors (running turns cancelled; everything stays
  staged for the new owner);
- in doubt (the local lease lapsed while renewals stall, or a turn found the key naming another
  owner): the session's actor serves nothing more until ``reestablished`` confirms the partition
  ours again and hands it the session's staged messages in staging order (or the loss above stops it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import AsyncEngine

from consumers.actors import ActorRegistry
from consumers.inbound_loop import InboundLoop
from consumers.inflight import recover_inflight
from consumers.max_deliveries import watch_max_deliveries
from consumers.metrics import Metrics
from consumers.ownership import PartitionOwnership
from consumers.partitions import CATCH_ALL_PARTITION, partition_consumer, partition_of, stored_partition
from consumers.settings import Settings
from core.inbox import StagedMessage
from core.sessions.manager import SessionManager
from core.store.inbox import SqlInbox
from core.store.partition_epochs import Claim, force_epoch, record_epoch
from schemas.subjects import Subjects
from schemas.wire import InboundMessage

log = logging.getLogger(__name__)


class PartitionedInbound:
    """One fetch loop per owned partition, started and stopped as ownership moves."""

    def __init__(
        self,
        settings: Settings,
        subjects: Subjects,
        *,
        connection: Client,
        js: JetStreamContext,
        inbox: SqlInbox,
        actors: ActorRegistry,
        manager: SessionManager,
        metrics: Metrics,
        make_loop: Callable[[str, Callable[[], bool]], InboundLoop],
        db: AsyncEngine,
        forget_moved: Callable[[Callable[[str], bool]], None] = lambda moved: None,
    ) -> None:
        s = settings
        self._db = db
        self._settings = s
        self._subjects = subjects
        self._connection = connection
        self._js = js
        self._inbox = inbox
        self._actors = actors
        self._manager = manager
        self._metrics = metrics
        self._make_loop = make_loop
        self._forget_moved = forget_moved  # SessionOpener.forget_moved
        self._ownership_lost = asyncio.Event()  # the process's ownership-lost event, given by start()
        sqlite = s.database_url.startswith("sqlite")
        self.ownership = PartitionOwnership(
            js,
            f"{subjects.stream_prefix}_PARTITIONS",
            s.partitions,
            s.lease_ttl_s,
            on_gained=self._gained,
            on_lost=self._lost,
            max_members=1 if sqlite else None,  # SQLite: the one lease holder owns every partition
            replicas=s.stream_replicas,
        )
        self.loops: dict[int, InboundLoop] = {}
        self._advisories: dict[int, Subscription] = {}
        self._first = True

    def partition_of(self, session_id: str | None) -> int:
        return partition_of(session_id, self._settings.partitions)

    def owns_session(self, session_id: str | None) -> bool:
        return self.ownership.owns(self.partition_of(session_id))

    def still_owner(self, session_id: str) -> Callable[[], Awaitable[bool]]:
        partition = self.partition_of(session_id)
        return lambda: self.ownership.still_ours(partition)

    def owns(self, session_id: str) -> bool:
        """The actors' fence (``OwnershipFence``): ours by the local lease ("": the session-less actor)."""
        return self.owns_session(session_id or None)

    def epoch_of(self, session_id: str | None) -> Claim | None:
        """The SQL write fence (``WriteFence``): the session's partition and the epoch we hold it at."""
        partition = self.partition_of(session_id)
        epoch = self.ownership.epoch(partition)
        return None if epoch is None else (partition, epoch)

    async def reestablished(self, session_id: str) -> list[tuple[StagedMessage, InboundMessage]]:
        """Wait until the session's partition is ours again, by the local lease and then by the
        bucket; return its staged, unfinished messages in staging order. A partition that moved
        is handed over instead (``_lost`` stops the waiting actor)."""
        partition = self.partition_of(session_id or None)
        while not (self.ownership.owns(partition) and await self.ownership.still_ours(partition)):
            await self.ownership.renewed()
        await self._inbox.flush()  # finished messages' marks written: they are not replayed
        return [
            (staged, InboundMessage.model_validate(orjson.loads(staged.payload)))
            for staged in await self._inbox.pending()
            if (staged.session_id or "") == session_id
        ]

    async def start(self, lost: asyncio.Event) -> None:
        self._ownership_lost = lost
        await self.ownership.start()

    async def stop_fetching(self) -> None:
        """Shutdown, first step: no more balancing, no more fetching (running turns may drain, their
        partitions' leases still renewed)."""
        await self.ownership.stop_balancing()
        loops, self.loops = self.loops, {}
        await asyncio.gather(*(loop.stop() for loop in loops.values()), return_exceptions=True)
        for sub in self._advisories.values():
            await _quietly(sub.unsubscribe())
        self._advisories.clear()

    async def abandon(self) -> None:
        """The prefix lease is lost (SQLite: another process owns everything now): stop at once, release nothing."""
        await self.ownership.stop()
        self.ownership.held.clear()
        await self.stop_fetching()

    async def release(self) -> None:
        """Shutdown, last step (work drained and flushed): the other processes take the partitions at once."""
        await self.ownership.stop()
        await self.ownership.release_all()

    # -- transitions -------------------------------------------------------------------

    async def _gained(self, partitions: list[int]) -> None:
        partitions = await self._record_epochs(partitions)  # before anything is replayed
        if not self._first:
            await self._manager.reload()  # the previous owner's records and generations
        self._first = False
        wanted = set(partitions)
        for staged in await self._inbox.pending():
            if self.partition_of(staged.session_id) in wanted:
                await self._actors.deliver(staged, InboundMessage.model_validate(orjson.loads(staged.payload)))
        for partition in partitions:
            # Started even when the local lease looks lapsed right now (a renewal late during a long
            # take-over): the loop waits until the partition is ours and is stopped if it is lost. A
            # partition skipped here stayed held, renewed and never fetched once its lease recovered.
            name = partition_consumer(self._settings.consumer_name, partition)
            loop = self._make_loop(name, self._fence(partition))
            prefix = self._settings.prefix

            async def recovered(
                msgs: list[Msg], p: int = partition, lp: InboundLoop = loop, pre: str = prefix
            ) -> None:
                ours = [m for m in msgs if _in_partition(pre, m.subject, p)]
                if ours:
                    await lp.process_batch(ours)

            async def recover(name: str = name, recovered: Callable[[list[Msg]], Awaitable[None]] = recovered) -> int:
                return await recover_inflight(
                    self._connection, self._js, self._subjects.inbound_stream, name, recovered,
                    self._settings.fetch_batch,
                )

            loop.start(recover)
            self.loops[partition] = loop
            self._advisories[partition] = await watch_max_deliveries(
                self._connection, self._js, self._subjects.inbound_stream, name, loop.process_read, self._ownership_lost
            )
        self._metrics.set_ownership("owner")

    async def _record_epochs(self, partitions: list[int]) -> list[int]:
        """Store the epoch of each gained partition; return those recorded. A newer stored epoch means
        a newer owner (we took the partition and were overtaken before recording: it is not ours), or
        one from an earlier lease bucket (revisions restart with a new bucket) when the bucket still
        names us."""
        recorded: list[int] = []
        for partition in partitions:
            epoch = self.ownership.epoch(partition)
            if epoch is None:
                continue
            owner = self.ownership.owner_id
            if await record_epoch(self._db, partition, epoch, owner):
                recorded.append(partition)
            elif await self.ownership.names_us(partition):
                log.warning("partition %d: the stored epoch is newer than the lease bucket's %d (a new bucket); "
                            "taking it over", partition, epoch)
                await force_epoch(self._db, partition, epoch, owner)
                recorded.append(partition)
            else:
                log.warning("partition %d: a newer owner recorded its epoch before us (ours %d); not taken",
                            partition, epoch)
                self.ownership.forget(partition)
        return recorded

    async def _lost(self, partitions: list[int]) -> None:
        gone = set(partitions)
        loops = [self.loops.pop(p) for p in partitions if p in self.loops]
        await asyncio.gather(*(loop.stop(drain_timeout_s=0) for loop in loops), return_exceptions=True)
        for p in partitions:
            sub = self._advisories.pop(p, None)
            if sub is not None:
                await _quietly(sub.unsubscribe())
        # Its sessions may be written by the new owner now: a session created here and not opened yet, and
        # an unloaded one's known journal tail, are known no more (SessionOpener.forget_moved).
        self._forget_moved(lambda sid: self.partition_of(sid) in gone)
        stopped = await self._actors.release_sessions(lambda sid: self.partition_of(sid) in gone)
        # Again, now that their actors are gone (one evicted during the release may have kept a tail).
        self._forget_moved(lambda sid: self.partition_of(sid) in gone)
        log.info("partitions %s handed over: %d session actors stopped", partitions, stopped)

    def _fence(self, partition: int) -> Callable[[], bool]:
        return lambda: self.ownership.owns(partition)


def _in_partition(prefix: str, subject: str, partition: int) -> bool:
    stored = stored_partition(prefix, subject)
    return stored == partition or (stored is None and partition == CATCH_ALL_PARTITION)


async def _quietly(aw: Awaitable[Any]) -> None:
    try:
        await aw
    except Exception as exc:
        log.debug("partition bookkeeping failed: %r", exc)
