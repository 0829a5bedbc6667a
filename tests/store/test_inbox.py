"""The durable inbox: staging is idempotent, pending keeps order, finished rows are pruned (MQ-8)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from core.store.committer import GroupCommitter
from core.store.db import metadata
from core.store.inbox import DONE, DROPPED, STAGED, SqlInbox, StagedMessage


@pytest.fixture
async def inbox(engine: AsyncEngine) -> AsyncIterator[SqlInbox]:
    import core.store.inbox  # noqa: F401 - registers the inbox table

    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    committer = GroupCommitter(engine)
    box = SqlInbox(engine, committer)
    box.start()
    try:
        yield box
    finally:
        await box.close()
        await committer.aclose()


def message(mid: str, sid: str = "s1") -> StagedMessage:
    return StagedMessage(platform="cli", message_id=mid, session_id=sid, generation=0, payload=b"{}")


async def test_a_message_is_staged_once_and_pending_keeps_arrival_order(inbox: SqlInbox) -> None:
    # MQ-8: redelivery and replays are safe because staging is idempotent on (platform, id).
    assert await inbox.stage([message("a"), message("b"), message("a")]) == [True, True, False]
    assert await inbox.stage([message("b"), message("c")]) == [False, True]
    assert [m.message_id for m in await inbox.pending()] == ["a", "b", "c"]
    inbox.mark(message("a"), DONE)
    inbox.mark(message("b"), DROPPED)
    assert await inbox.status_of("cli", "a") == DONE
    assert [m.message_id for m in await inbox.pending()] == ["c"]


async def test_finished_rows_are_pruned_and_staged_rows_stay(inbox: SqlInbox) -> None:
    await inbox.stage([message("done"), message("waiting")])
    inbox.mark(message("done"), DONE)
    await inbox.flush()
    assert await inbox.forget_finished(older_than_s=0) == 1
    assert await inbox.status_of("cli", "done") is None
    assert await inbox.status_of("cli", "waiting") == STAGED
