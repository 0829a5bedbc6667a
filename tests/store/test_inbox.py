"""The durable inbox: staging is idempotent, pending keeps order, finished rows are pruned (MQ-8)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert
from sqlalchemy.ext.asyncio import AsyncEngine

import core.store.inbox as inbox_module
from core.inbox import Inbox
from core.store.committer import GroupCommitter
from core.store.db import metadata
from core.store.inbox import DONE, DROPPED, STAGED, SqlInbox, StagedMessage
from core.store.inbox import inbox as inbox_table
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


async def test_a_prune_reads_only_the_rows_it_deletes_and_lets_other_writes_commit_between_its_chunks(
    inbox: SqlInbox, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The inbox keeps the inbound retention's finished rows (7 days by default) and prunes the oldest hour of
    # them every hour. On SQLite the group committer runs its transactions on the event loop: the prune used to
    # read the whole table to find those rows and delete all of them in one statement, holding every session's
    # turn meanwhile. It now reads them through ix_inbox_finished_at, PRUNE_CHUNK_ROWS at a time.
    monkeypatch.setattr(inbox_module, "PRUNE_CHUNK_ROWS", 20)
    now = time.time()

    def row(mid: str, status: str, finished_at: float | None) -> dict[str, Any]:
        return {
            "platform": "cli", "message_id": mid, "session_id": "s1", "generation": 0, "payload": b"{}",
            "status": status, "staged_at": now - 7200, "finished_at": finished_at,
        }

    old = [row(f"old-{i}", DONE if i % 2 else DROPPED, now - 7200 + i) for i in range(200)]
    recent = [row(f"recent-{i}", DONE, now - 60) for i in range(50)]
    waiting = [row("waiting", STAGED, None)]
    async with engine.begin() as conn:
        await conn.execute(insert(inbox_table), old + recent + waiting)
    loop = asyncio.get_running_loop()
    deletes: list[tuple[str, Any, int]] = []
    live: list[asyncio.Task[list[bool]]] = []
    staged_after: list[int] = []

    async def stage_live() -> list[bool]:
        fresh = await inbox.stage([message("live")])
        staged_after.append(len(deletes))
        return fresh

    def seen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM INBOX"):
            deletes.append((statement, parameters, cursor.rowcount))
            if len(deletes) == 1:  # a live message arrives while the prune runs
                loop.call_soon_threadsafe(lambda: live.append(asyncio.ensure_future(stage_live())))

    event.listen(Engine, "after_cursor_execute", seen)
    try:
        assert await inbox.forget_finished(older_than_s=3600) == 200
        assert await live[0] == [True]
    finally:
        event.remove(Engine, "after_cursor_execute", seen)
    assert [count for _, _, count in deletes] == [20] * 10 + [0]
    assert staged_after[0] < len(deletes) - 1, "the live message waited for the whole prune"
    assert await inbox.status_of("cli", "old-0") is None and await inbox.status_of("cli", "old-199") is None
    assert await inbox.status_of("cli", "recent-0") == DONE
    assert await inbox.status_of("cli", "waiting") == STAGED
    if engine.dialect.name == "sqlite":
        statement, parameters, _ = deletes[0]
        with contextlib.closing(sqlite3.connect(str(engine.url.database))) as db:
            plan = " | ".join(str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + statement, parameters))
        assert "USING INDEX ix_inbox_finished_at" in plan or "USING COVERING INDEX ix_inbox_finished_at" in plan, plan
        assert "SCAN inbox" not in plan, plan


async def test_the_background_writer_retries_marks_whose_write_failed(
    inbox: SqlInbox, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lost mark is only looked at again, but a database hiccup must not lose it for good.
    await inbox.stage([message("flaky")])
    write = inbox._write
    failures = {"left": 2}

    async def failing_then_working(op: Any, **how: Any) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise OSError("database went away")
        await write(op, **how)

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
