"""Journal rows are keyed by generation: a late write of generation g is never read by g+1,
the clear of a deletion removes older generations, and start-up removes orphaned rows."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

import core.store.tables  # noqa: F401 - the session tables the start-up cleanup joins
from core.engine import EntryKind, JournalEntry
from core.store.journal_repo import SqlHistoryJournal
from core.store.session_tables import generations_table, sessions_table
from tests.fakes.journal import InMemoryJournal


def _entry(seq: int, **payload: Any) -> JournalEntry:
    return JournalEntry(seq=seq, kind=EntryKind.NOTICE, at="2025-01-01T00:00:00+00:00", payload=payload)


async def _record(engine: AsyncEngine, session_id: str, generation: int | None = None) -> None:
    now = time.time()
    async with engine.begin() as conn:
        await conn.execute(insert(sessions_table).values(id=session_id, status="active", created_at=now, updated_at=now))
        if generation is not None:
            await conn.execute(insert(generations_table).values(session_id=session_id, generation=generation))


@pytest.mark.rule("SM-21", "SM-22")
async def test_a_late_write_of_a_deleted_generation_is_never_read_by_the_next(engine: AsyncEngine) -> None:
    journal = SqlHistoryJournal(engine)
    sid = f"late-{uuid.uuid4()}"
    await journal.append(sid, [_entry(0, text="old"), _entry(1, text="old")], generation=0)
    await journal.clear(sid, before_generation=1)  # the deletion's clear (generation 1 is current)
    # The stalled turn's write lands after the clear, still as generation 0, seq 2.
    await journal.append(sid, [_entry(2, text="late")], generation=0)
    assert await journal.load(sid, generation=1) == []
    # Generation 1 starts at seq 0 again: the late rows take no seq away from it.
    await journal.append(sid, [_entry(0, text="new"), _entry(1, text="new"), _entry(2, text="new")], generation=1)
    assert [e.payload["text"] for e in await journal.load(sid, generation=1)] == ["new", "new", "new"]
    assert [e.payload["text"] for e in await journal.load(sid, generation=0)] == ["late"]
    await journal.aclose()


async def test_a_clear_without_a_generation_removes_the_whole_history(engine: AsyncEngine) -> None:
    # memory.clear keeps the generation: its history clear removes every row of the session.
    journal = SqlHistoryJournal(engine)
    sid, other = f"all-{uuid.uuid4()}", f"other-{uuid.uuid4()}"
    await journal.append(sid, [_entry(0)], generation=0)
    await journal.append(sid, [_entry(0)], generation=1)
    await journal.append(other, [_entry(0)], generation=0)
    await journal.clear(sid)
    assert await journal.load(sid, generation=0) == [] and await journal.load(sid, generation=1) == []
    assert len(await journal.load(other, generation=0)) == 1
    await journal.aclose()


@pytest.mark.rule("SM-21")
async def test_start_up_cleanup_removes_orphaned_and_superseded_rows(engine: AsyncEngine) -> None:
    journal = SqlHistoryJournal(engine)
    orphan = f"orphan-{uuid.uuid4()}"  # record gone (a crash between its removal and the clear)
    reused = f"reused-{uuid.uuid4()}"  # deleted at generation 1, filed again at 2
    live = f"live-{uuid.uuid4()}"  # never deleted
    await _record(engine, reused, generation=2)
    await _record(engine, live)
    await journal.append(orphan, [_entry(0), _entry(1)], generation=0)
    await journal.append(reused, [_entry(0)], generation=1)
    await journal.append(reused, [_entry(0, text="kept")], generation=2)
    await journal.append(live, [_entry(0, text="kept")], generation=0)

    assert await journal.clear_stale() == 3
    assert await journal.load(orphan, generation=0) == []
    assert await journal.load(reused, generation=1) == []
    assert [e.payload for e in await journal.load(reused, generation=2)] == [{"text": "kept"}]
    assert [e.payload for e in await journal.load(live, generation=0)] == [{"text": "kept"}]
    assert await journal.clear_stale() == 0
    await journal.aclose()


async def test_the_in_memory_twin_keys_rows_by_generation() -> None:
    journal = InMemoryJournal()
    await journal.append("s", [_entry(0, text="old")], generation=0)
    await journal.clear("s", before_generation=1)
    await journal.append("s", [_entry(1, text="late")], generation=0)
    await journal.append("s", [_entry(0, text="new")], generation=1)
    assert [e.payload["text"] for e in await journal.load("s", generation=1)] == ["new"]
    assert [e.payload["text"] for e in await journal.load("s")] == ["late"]  # generation 0 by default
    await journal.clear("s")
    assert await journal.load("s", generation=1) == []


@pytest.mark.rule("SM-21")
@pytest.mark.parametrize("make", [SqlHistoryJournal, None], ids=["sql", "in-memory"])
async def test_a_deleted_chunk_is_cleared_below_each_session_s_own_generation(
    engine: AsyncEngine, make: type[SqlHistoryJournal] | None
) -> None:
    # A subtree deletion clears many sessions at once, each below the generation it was given.
    journal = make(engine) if make is not None else InMemoryJournal()
    run = uuid.uuid4().hex[:8]
    a, b, kept = f"a-{run}", f"b-{run}", f"kept-{run}"
    for sid in (a, b, kept):
        for generation in (0, 1, 2):
            await journal.append(sid, [_entry(0, text=f"{sid}/{generation}")], generation=generation)
    await journal.clear_older([(a, 2), (b, 1)])
    assert [await journal.load(a, generation=g) for g in (0, 1)] == [[], []]
    assert await journal.load(b, generation=0) == []
    assert [e.payload["text"] for e in await journal.load(b, generation=1)] == [f"{b}/1"]
    assert [e.payload["text"] for e in await journal.load(a, generation=2)] == [f"{a}/2"]
    assert [len(await journal.load(kept, generation=g)) for g in (0, 1, 2)] == [1, 1, 1]  # not in the chunk
    await journal.clear_older([])  # nothing to clear: no write
    if isinstance(journal, SqlHistoryJournal):
        await journal.aclose()
