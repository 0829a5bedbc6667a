"""The durable inbox: staging is idempotent, pending keeps order, finished rows are pruned (MQ-8)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from core.inbox import Inbox
from core.store.committer import GroupCommitter
from core.store.db import metadata
from core.store.inbox import DONE, DROPPED, STAGED, SqlInbox, StagedMessage
from tests.inbox_rows import inbox_row_count, inbox_status_in_table
from tests.waiting import wait_for


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


async def test_a_message_staged_alone_is_staged_once_with_its_payload(inbox: SqlInbox) -> None:
    # MQ-8 for the one-message batch of a live chat (its own statement, compiled once per dialect).
    alone = StagedMessage(platform="cli", message_id="x", session_id="s1", generation=3, payload=b"\x00{\xff}")
    assert await inbox.stage([alone]) == [True]
    assert await inbox.stage([alone]) == [False]
    assert await inbox.stage([message("y"), message("y")]) == [True, False]
    assert await inbox.pending() == [alone, message("y")]


async def test_a_large_batch_is_staged_in_chunks_once_each_in_order(inbox: SqlInbox) -> None:
    # MQ-8 for a backlog's batch: 300 rows run as statements of 256, 32, 8 and 4 rows; what is
    # staged already (anywhere in the batch, across chunk boundaries) is reported and not staged again.
    assert await inbox.stage([message(f"m{i:03}") for i in range(0, 300, 7)]) == [True] * 43
    batch = [
        StagedMessage(platform="cli", message_id=f"m{i:03}", session_id=f"s{i % 5}", generation=i, payload=bytes([i % 256]))
        for i in range(300)
    ]
    assert await inbox.stage(batch) == [i % 7 != 0 for i in range(300)]
    pending = await inbox.pending()
    assert [m.message_id for m in pending] == [f"m{i:03}" for i in range(0, 300, 7)] + [
        f"m{i:03}" for i in range(300) if i % 7
    ]
    assert [m for m in pending if m.message_id == "m299"] == [batch[299]]


async def test_finished_rows_are_pruned_and_staged_rows_stay(inbox: SqlInbox) -> None:
    await inbox.stage([message("done"), message("waiting")])
    inbox.mark(message("done"), DONE)
    await inbox.flush()
    assert await inbox.forget_finished(older_than_s=0) == 1
    assert await inbox.status_of("cli", "done") is None
    assert await inbox.status_of("cli", "waiting") == STAGED


async def test_the_background_writer_retries_marks_whose_write_failed(
    inbox: SqlInbox, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lost mark is only looked at again, but a database hiccup must not lose it for good.
    await inbox.stage([message("flaky")])
    write = inbox._write
    failures = {"left": 2}

    async def failing_then_working(op: Any, *, lazy: bool = False) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise OSError("database went away")
        await write(op, lazy=lazy)

    monkeypatch.setattr(inbox, "_write", failing_then_working)
    inbox.mark(message("flaky"), DONE)

    async def written_done() -> bool:
        return await inbox_status_in_table(engine, "cli", "flaky") == DONE

    await wait_for(written_done, what="the retried mark")
    assert failures["left"] == 0


async def test_the_sql_inbox_is_an_inbox_and_its_rows_can_be_counted(inbox: SqlInbox, engine: AsyncEngine) -> None:
    port: Inbox = inbox  # checked by mypy: the adapter satisfies the port
    await port.stage([message("one", "counted"), message("two", "counted"), message("three", "other")])
    assert await inbox_row_count(engine, "counted") == 2
    assert await inbox_row_count(engine) >= 3


async def test_writing_status_marks_in_the_background_leaves_no_cyclic_garbage(engine: AsyncEngine) -> None:
    # The served process's young collections walk and free whatever the message path leaves
    # cyclic (each such object lengthens their pauses): a background flush of marks leaves none.
    import gc

    import core.store.inbox  # noqa: F401 - registers the inbox table

    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    committer = GroupCommitter(engine, lazy_wait_s=0)
    box = SqlInbox(engine, committer)
    box.start()
    messages = [StagedMessage("cli", f"gc-{n}", "s-gc", 0, b"{}") for n in range(21)]
    try:
        await box.stage(messages)
        box.mark(messages[0], DONE)  # warm: whatever is created once
        await wait_for(lambda: not box._marks, what="the first mark written")
        await box.status_of("cli", messages[0].message_id)
        gc.collect()
        gc.disable()
        try:
            for m in messages[1:]:
                box.mark(m, DONE)
                await wait_for(lambda: not box._marks, what="the mark written")
            assert gc.collect() == 0
        finally:
            gc.enable()
        assert await box.status_of("cli", messages[-1].message_id) == DONE
    finally:
        await box.close()
        await committer.aclose()
