"""Group commit: writes of many callers share transactions; a cancelled caller's write still lands."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncEngine

from core.store.committer import GroupCommitter


async def _count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM committer_probe"))).scalar_one())


@pytest.mark.rule("MQ-8")
async def test_grouped_writes_land_each_failure_stays_its_own_and_a_cancelled_caller_still_writes(
    engine: AsyncEngine,
) -> None:
    # MQ-8: staging is durable when the caller's write returns; one bad write in a group does not
    # fail its neighbours; cancelling a caller (a stopped turn) does not undo its queued write.
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE IF NOT EXISTS committer_probe (n INTEGER PRIMARY KEY)"))
        await conn.execute(text("DELETE FROM committer_probe"))
    committer = GroupCommitter(engine)

    def insert(n: int):  # type: ignore[no-untyped-def]
        def op(conn: Connection) -> int:
            conn.execute(text("INSERT INTO committer_probe (n) VALUES (:n)"), {"n": n})
            return n

        return op

    try:
        results = await asyncio.gather(
            *(committer.run(insert(n)) for n in (1, 2, 2, 3)), return_exceptions=True
        )
        assert results[0] == 1 and results[1] == 2 and results[3] == 3
        assert isinstance(results[2], Exception)  # the duplicate failed alone
        cancelled = asyncio.ensure_future(committer.run(insert(4)))
        await asyncio.sleep(0)  # queued
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await committer.run(insert(5))  # a later write commits after the cancelled one's group
        assert await _count(engine) == 5
    finally:
        await committer.aclose()
        async with engine.begin() as conn:
            await conn.execute(text("DROP TABLE committer_probe"))
