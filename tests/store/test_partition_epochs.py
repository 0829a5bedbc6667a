"""The write-time ownership fence: staging and journal appends carry the partition epoch they hold
and are refused, nothing written, once a newer owner recorded its epoch (docs/protocol.md#partitioned-ownership)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from uuid import uuid4

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from core.engine.journal import EntryKind, JournalEntry
from core.errors import OwnershipLost
from core.store.committer import GroupCommitter
from core.store.db import metadata
from core.store.inbox import SqlInbox, StagedMessage, inbox
from core.store.journal_repo import SqlHistoryJournal
from core.store.journal_tables import journal_entries
from core.store.partition_epochs import record_epoch, stored_epoch


@dataclass
class HeldEpochs:
    """A process's view of its partitions: every session in partition 0, held at ``epoch`` (None: not held)."""

    epoch: int | None
    partition_of: dict[str, int] = field(default_factory=dict)

    def epoch_of(self, session_id: str | None) -> tuple[int, int] | None:
        partition = self.partition_of.get(session_id or "", 0)
        return None if self.epoch is None else (partition, self.epoch)


@pytest.fixture
async def committer(engine: AsyncEngine) -> AsyncIterator[GroupCommitter]:
    import core.store.tables  # noqa: F401 - the whole schema

    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    committer = GroupCommitter(engine)
    try:
        yield committer
    finally:
        await committer.aclose()


def message(sid: str) -> StagedMessage:
    return StagedMessage(platform="cli", message_id=uuid4().hex, session_id=sid, generation=0, payload=b"{}")


def entry(seq: int) -> JournalEntry:
    return JournalEntry(seq=seq, kind=EntryKind.EVENT, turn_id=None, external_event_id=None, at="2026-12-01T18:00:00Z", payload={"n": seq})


async def count(engine: AsyncEngine, table: object, session_id: str) -> int:
    async with engine.connect() as conn:
        return int((await conn.scalar(select(func.count()).select_from(table).where(table.c.session_id == session_id))) or 0)  # type: ignore[attr-defined]


async def test_a_stale_owner_stages_nothing_after_a_newer_owner_recorded_its_epoch(
    engine: AsyncEngine, committer: GroupCommitter
) -> None:
    sid = f"s-{uuid4().hex}"
    old, new = SqlInbox(engine, committer), SqlInbox(engine, committer)
    old.fence, new.fence = HeldEpochs(epoch=5), HeldEpochs(epoch=9)
    assert await record_epoch(engine, 0, 5, "old")
    assert await old.stage([message(sid)]) == [True]  # the owner of epoch 5 stages while it is the owner
    assert await record_epoch(engine, 0, 9, "new")  # the new owner took the partition, before its replay
    with pytest.raises(OwnershipLost):
        await old.stage([message(sid)])
    assert await count(engine, inbox, sid) == 1  # nothing of the stale owner landed after the hand-over
    assert await new.stage([message(sid)]) == [True]
    assert await count(engine, inbox, sid) == 2


async def test_a_stale_owner_appends_nothing_to_the_journal_and_the_new_owners_history_is_untouched(
    engine: AsyncEngine, committer: GroupCommitter
) -> None:
    sid = f"s-{uuid4().hex}"
    old = SqlHistoryJournal(engine, committer=committer)
    new = SqlHistoryJournal(engine, committer=committer)
    old.fence, new.fence = HeldEpochs(epoch=5), HeldEpochs(epoch=9)
    await record_epoch(engine, 0, 5, "old")
    await old.append(sid, [entry(0)])
    await record_epoch(engine, 0, 9, "new")
    await new.append(sid, [entry(1)])
    with pytest.raises(OwnershipLost):
        await old.append(sid, [entry(2)])
    assert [e.seq for e in await new.load(sid)] == [0, 1]


async def test_a_refused_write_fails_only_its_own_caller_in_a_shared_group_transaction(
    engine: AsyncEngine, committer: GroupCommitter
) -> None:
    # The group committer runs both writes in one transaction: the refusal is an answer, not an error.
    stale, owner = f"s-{uuid4().hex}", f"s-{uuid4().hex}"
    fence = HeldEpochs(epoch=9, partition_of={stale: 1, owner: 0})
    journal = SqlHistoryJournal(engine, committer=committer)
    journal.fence = fence
    await record_epoch(engine, 0, 9, "us")
    await record_epoch(engine, 1, 11, "someone else")
    transactions = committer.transactions
    results = await asyncio.gather(
        journal.append(stale, [entry(0)]), journal.append(owner, [entry(0)]), return_exceptions=True
    )
    assert isinstance(results[0], OwnershipLost)
    assert results[1] is None
    assert committer.transactions - transactions == 1  # one transaction, no one-by-one retry
    assert await count(engine, journal_entries, stale) == 0
    assert await count(engine, journal_entries, owner) == 1


async def test_a_partition_not_held_at_all_writes_nothing(engine: AsyncEngine, committer: GroupCommitter) -> None:
    box = SqlInbox(engine, committer)
    box.fence = HeldEpochs(epoch=None)
    sid = f"s-{uuid4().hex}"
    with pytest.raises(OwnershipLost):
        await box.stage([message(sid)])
    assert await count(engine, inbox, sid) == 0


async def test_epochs_only_move_forward(engine: AsyncEngine, committer: GroupCommitter) -> None:
    # A process that took the partition earlier and records late never overwrites a newer owner's epoch.
    assert await record_epoch(engine, 3, 9, "new")
    assert not await record_epoch(engine, 3, 5, "late")
    assert await stored_epoch(engine, 3) == 9
    assert await record_epoch(engine, 3, 12, "newer")
    assert await stored_epoch(engine, 3) == 12
