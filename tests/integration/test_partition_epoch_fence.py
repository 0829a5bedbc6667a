"""The SQL write fence across a real hand-over: a process that held a partition and was paused past its
lease stages and appends nothing once the new owner took the partition (real nats-server KV leases,
real PostgreSQL; docs/protocol.md#partitioned-ownership)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import uuid4

import pytest
from nats.aio.client import Client
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

import core.store.tables  # noqa: F401 - the whole schema
from consumers.ownership import PartitionOwnership
from consumers.partitioned import PartitionedInbound
from consumers.settings import Settings
from core.engine.journal import EntryKind, JournalEntry
from core.errors import OwnershipLost
from core.store.committer import GroupCommitter
from core.store.db import create_db_engine, metadata
from core.store.inbox import SqlInbox, StagedMessage, inbox
from core.store.journal_repo import SqlHistoryJournal
from core.store.partition_epochs import record_epoch, stored_epoch
from schemas.subjects import Subjects
from tests.waiting import wait_for

pytestmark = pytest.mark.postgres

TTL_S = 1.0


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_db_engine(postgres_url)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    try:
        yield engine
    finally:
        await engine.dispose()


class Process:
    """The ownership half of one turnstile process: its partition leases, the epochs it records, its writes."""

    def __init__(self, settings: Settings, nc: Client, engine: AsyncEngine, name: str) -> None:
        self.committer = GroupCommitter(engine)
        self.inbox = SqlInbox(engine, self.committer)
        self.journal = SqlHistoryJournal(engine, committer=self.committer)
        js = nc.jetstream()
        self.parts = PartitionedInbound(
            settings, Subjects(settings.prefix), connection=nc, js=js, inbox=self.inbox, actors=None,  # type: ignore[arg-type]
            manager=None, metrics=None, make_loop=None, db=engine,  # type: ignore[arg-type]
        )
        self.recorded: list[int] = []

        async def gained(partitions: list[int]) -> None:  # PartitionedInbound._gained's first step
            self.recorded.extend(await self.parts._record_epochs(partitions))

        async def lost(partitions: list[int]) -> None:
            return None

        self.parts.ownership = PartitionOwnership(
            js, f"{Subjects(settings.prefix).stream_prefix}_PARTITIONS", settings.partitions, TTL_S,
            on_gained=gained, on_lost=lost, owner_id=f"{name}:{uuid4().hex[:6]}",
        )
        self.inbox.fence = self.journal.fence = self.parts

    async def close(self) -> None:
        await self.parts.ownership.stop()
        await self.committer.aclose()


def message(sid: str) -> StagedMessage:
    return StagedMessage(platform="cli", message_id=uuid4().hex, session_id=sid, generation=0, payload=b"{}")


def entry(seq: int) -> JournalEntry:
    return JournalEntry(seq=seq, kind=EntryKind.EVENT, turn_id=None, external_event_id=None,
                        at="2026-12-01T18:00:00Z", payload={"n": seq})


async def staged_rows(engine: AsyncEngine, sid: str) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(inbox).where(inbox.c.session_id == sid)) or 0)


async def test_a_paused_owner_writes_nothing_after_the_new_owner_took_its_partition(
    settings: Settings, nc: Client, engine: AsyncEngine
) -> None:
    settings = settings.model_copy(update={"partitions": 2, "lease_ttl_s": TTL_S})
    sid = f"s-{uuid4().hex[:8]}"
    old = Process(settings, nc, engine, "old")
    new = Process(settings, nc, engine, "new")
    try:
        await old.parts.ownership.start()
        p = old.parts.partition_of(sid)
        await wait_for(lambda: p in old.recorded, timeout_s=15, what="the first owner to record its epoch")
        assert await old.inbox.stage([message(sid)]) == [True]
        await old.journal.append(sid, [entry(0)])

        # SIGSTOP stand-in: the old process renews nothing more but still holds its epoch in memory.
        await old.parts.ownership.stop()
        await new.parts.ownership.start()
        await wait_for(lambda: p in new.recorded, timeout_s=15, what="the new owner to record its epoch")
        new_epoch = new.parts.ownership.epoch(p)
        assert new_epoch is not None and new_epoch > (old.parts.ownership.epoch(p) or 0)
        assert await stored_epoch(engine, p) == new_epoch

        # The window the local lease check cannot close: the old process stages and appends after
        # the new owner's recording (and so after its replay would have read the inbox).
        with pytest.raises(OwnershipLost):
            await old.inbox.stage([message(sid)])
        with pytest.raises(OwnershipLost):
            await old.journal.append(sid, [entry(1)])
        assert await staged_rows(engine, sid) == 1

        assert await new.inbox.stage([message(sid)]) == [True]
        await new.journal.append(sid, [entry(1)])
        assert [e.payload["n"] for e in await new.journal.load(sid)] == [0, 1]
        assert await staged_rows(engine, sid) == 2
    finally:
        await old.close()
        await new.close()


async def test_epochs_of_an_earlier_lease_bucket_do_not_lock_a_partition_out(
    settings: Settings, nc: Client, engine: AsyncEngine
) -> None:
    # A fresh broker over an old database: the bucket's revisions restart below the stored epochs.
    settings = settings.model_copy(update={"partitions": 2, "lease_ttl_s": TTL_S})
    for p in range(2):
        assert await record_epoch(engine, p, 10**9, "a process of the previous bucket")
    worker = Process(settings, nc, engine, "fresh")
    try:
        await worker.parts.ownership.start()
        await wait_for(lambda: sorted(worker.recorded) == [0, 1], timeout_s=15, what="both partitions recorded")
        for p in range(2):
            assert await stored_epoch(engine, p) == worker.parts.ownership.epoch(p)
        assert await worker.inbox.stage([message("s")]) == [True]
    finally:
        await worker.close()


async def test_a_process_overtaken_before_it_recorded_does_not_take_the_partition(
    settings: Settings, nc: Client, engine: AsyncEngine
) -> None:
    settings = settings.model_copy(update={"partitions": 2, "lease_ttl_s": TTL_S})
    late = Process(settings, nc, engine, "late")
    try:
        await late.parts.ownership.start()
        await wait_for(lambda: len(late.parts.ownership.held) == 2, timeout_s=15, what="both partitions taken")
        # As if it had been paused between taking the leases and recording: a newer owner (the bucket
        # names it) recorded meanwhile.
        kv = await nc.jetstream().key_value(f"{Subjects(settings.prefix).stream_prefix}_PARTITIONS")
        await late.parts.ownership.stop()
        for p in range(2):
            revision = await kv.put(f"p.{p}", b"someone-else")
            await record_epoch(engine, p, revision, "someone-else")
        assert await late.parts._record_epochs([0, 1]) == []
        assert late.parts.ownership.held == {}
        with pytest.raises(OwnershipLost):
            await late.inbox.stage([message("s")])
    finally:
        await late.close()
