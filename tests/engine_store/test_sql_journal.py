"""SQL journal: durability, ordering, refusal of taken seqs, group commit, session restart."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import AsyncEngine

from core.engine import (
    EntryKind,
    JournalEntry,
    LeaseRegistry,
    RuntimeModel,
    SameSessionOnly,
    Session,
    SessionOptions,
    ToolDefinition,
    builtin_registry,
)
from core.engine.tools import ToolOutcome
from core.errors import CheckpointFailed, Conflict
from core.providers import ScriptedProvider
from core.store.journal_repo import SqlHistoryJournal
from core.store.knowledge_repo import SqlKnowledgeStore


def _entry(seq: int, **payload: Any) -> JournalEntry:
    return JournalEntry(seq=seq, kind=EntryKind.NOTICE, at="2025-01-01T00:00:00+00:00", payload=payload)


async def test_append_load_clear_round_trip(engine: AsyncEngine) -> None:
    journal = SqlHistoryJournal(engine)
    sid = f"s-{uuid.uuid4()}"
    await journal.append(sid, [_entry(0, text="a"), _entry(1, text="b", nested={"x": [1, 2]})])
    await journal.append(sid, [_entry(2, text="ü 数据")])
    loaded = await journal.load(sid)
    assert [e.seq for e in loaded] == [0, 1, 2]
    assert loaded[1].payload == {"text": "b", "nested": {"x": [1, 2]}} and loaded[2].payload["text"] == "ü 数据"
    await journal.clear(sid)
    assert await journal.load(sid) == []
    await journal.aclose()


async def test_load_from_a_seq_reads_that_generation_from_there_on(engine: AsyncEngine) -> None:
    # A reopen from a checkpoint reads only the rows the checkpoint does not cover.
    journal = SqlHistoryJournal(engine)
    sid = f"s-{uuid.uuid4()}"
    await journal.append(sid, [_entry(i, text=str(i)) for i in range(5)])
    await journal.append(sid, [_entry(0, text="next generation")], generation=1)
    assert [e.seq for e in await journal.load(sid, from_seq=3)] == [3, 4]
    assert [e.payload["text"] for e in await journal.load(sid, from_seq=3)] == ["3", "4"]
    assert await journal.load(sid, from_seq=5) == []
    assert [e.seq for e in await journal.load(sid, from_seq=0)] == [0, 1, 2, 3, 4]
    assert [e.payload["text"] for e in await journal.load(sid, generation=1, from_seq=0)] == ["next generation"]
    assert await journal.load(sid, generation=1, from_seq=1) == []
    await journal.aclose()


async def test_a_tail_read_the_loop_cannot_do_goes_through_the_pool(engine: AsyncEngine, tmp_path: Any) -> None:
    # SQLite reads a tail (from_seq > 0) on the loop through its read-only connection; when that
    # read fails (busy, or here: no such file) the same rows come through the async pool.
    if engine.dialect.name != "sqlite":
        pytest.skip("PostgreSQL reads through the pool only")
    journal = SqlHistoryJournal(engine)
    sid = f"s-{uuid.uuid4()}"
    await journal.append(sid, [_entry(i, text=str(i)) for i in range(3)])
    assert journal._tail_reader is not None
    journal._tail_reader.dispose()
    journal._tail_reader = create_engine(f"sqlite:///{tmp_path}/missing/dir.db")
    assert [e.payload["text"] for e in await journal.load(sid, from_seq=1)] == ["1", "2"]
    await journal.aclose()


async def test_taken_seq_is_a_conflict_and_does_not_fail_others(engine: AsyncEngine) -> None:
    journal = SqlHistoryJournal(engine)
    a, b = f"a-{uuid.uuid4()}", f"b-{uuid.uuid4()}"
    await journal.append(a, [_entry(0)])
    results = await asyncio.gather(
        journal.append(a, [_entry(0)]), journal.append(b, [_entry(0)]), return_exceptions=True
    )
    assert isinstance(results[0], Conflict) and results[1] is None
    assert len(await journal.load(b)) == 1 and len(await journal.load(a)) == 1
    await journal.aclose()


async def test_concurrent_appends_share_transactions(engine: AsyncEngine) -> None:
    journal = SqlHistoryJournal(engine)
    sessions = [f"g-{i}-{uuid.uuid4()}" for i in range(100)]

    async def writer(sid: str) -> None:
        for seq in range(5):
            await journal.append(sid, [_entry(seq, n=seq)])

    await asyncio.gather(*(writer(s) for s in sessions))
    assert journal.appends == 500
    assert journal.transactions < 250, f"group commit: {journal.transactions} transactions for 500 appends"
    for sid in sessions[:5]:
        assert [e.seq for e in await journal.load(sid)] == [0, 1, 2, 3, 4]
    await journal.aclose()


@pytest.mark.rule("KS-2")
@pytest.mark.rule("KS-10")
async def test_session_survives_a_process_restart_on_sql(engine: AsyncEngine, db_url: str) -> None:
    # KS-2, KS-10: crash mid-turn, new journal/engine objects, reopen from checkpoint, no tool re-run
    runs = {"n": 0}

    async def count(ctx: Any, args: dict[str, Any]) -> ToolOutcome:
        runs["n"] += 1
        return ToolOutcome(ok=True, content=f"run {runs['n']}")

    tools = builtin_registry([ToolDefinition(
        name="count", description="c", handler=count, idempotent=False,
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
    )])
    sid = f"restart-{uuid.uuid4()}"
    runtime = RuntimeModel(model="m", context_window_tokens=10_000)
    options = SessionOptions.conversation("dm", ["root"])
    journal = SqlHistoryJournal(engine)
    snaps: list[dict[str, Any]] = []

    async def flaky_checkpoint(snap: dict[str, Any]) -> None:
        if len(snaps) == 3:  # model response, call marker, result → the 4th (second marker) dies
            raise RuntimeError("process killed")
        snaps.append(snap)

    session = await Session.open(
        session_id=sid, system_prompt="p", runtime=runtime, options=options, journal=journal,
        provider=ScriptedProvider(directives=True), tools=tools, knowledge=SqlKnowledgeStore(engine),
        take_policy=SameSessionOnly(), leases=LeaseRegistry(),
    )
    await session.begin_user_turn("/tool count\n/tool count\n/say done")
    with pytest.raises(CheckpointFailed):
        await session.run_pending_turn("op-1", flaky_checkpoint)
    await journal.aclose()
    assert runs["n"] == 1

    fresh_journal = SqlHistoryJournal(engine)
    resumed = await Session.open(
        session_id=sid, system_prompt="p", runtime=runtime, options=options, journal=fresh_journal,
        provider=ScriptedProvider(directives=True), tools=tools, knowledge=SqlKnowledgeStore(engine), restored=snaps[-1],
        take_policy=SameSessionOnly(), leases=LeaseRegistry(),
    )
    assert await resumed.run_pending_turn("op-2", _noop) == "done"
    results = [i["payload"] for i in resumed.transcript if i["kind"] == "tool_result"]
    assert [r["content"] for r in results] == ["run 1", "run 2"]
    assert runs["n"] == 2
    reopened = await Session.open(
        session_id=sid, system_prompt="p", runtime=runtime, options=options, journal=fresh_journal,
        provider=ScriptedProvider(directives=True), tools=tools, knowledge=SqlKnowledgeStore(engine),
        take_policy=SameSessionOnly(), leases=LeaseRegistry(),
    )
    assert reopened.snapshot() == resumed.snapshot()
    await fresh_journal.aclose()


async def _noop(snapshot: dict[str, Any]) -> None:
    return None


async def test_the_newest_rows_answer_the_range_they_cover_and_no_other(engine: AsyncEngine) -> None:
    # KS-2 reopen: the journal tail past a checkpoint read ahead of the checkpoint (before its
    # next_seq is known) is exactly the range read, or no answer when the rows may not cover it.
    journal = SqlHistoryJournal(engine)
    sid = f"s-{uuid.uuid4()}"
    await journal.append(sid, [_entry(i, text=str(i)) for i in range(10)])
    await journal.append(sid, [_entry(0, text="next generation")], generation=1)
    newest = await journal.newest(sid, count=4)
    for from_seq in (6, 8, 9, 10, 12):
        answer = newest.entries_from(from_seq)
        assert answer is not None and answer == await journal.load(sid, from_seq=from_seq)
    assert newest.entries_from(5) is None and newest.entries_from(0) is None
    whole = await journal.newest(sid, generation=1, count=4)  # fewer rows than asked: the whole generation
    assert whole.entries_from(0) == await journal.load(sid, generation=1) and whole.entries_from(1) == []
    assert (await journal.newest(f"s-{uuid.uuid4()}")).entries_from(0) == []
    await journal.aclose()


async def test_a_reopen_takes_its_tail_from_the_read_ahead_once_and_reads_the_journal_otherwise(
    engine: AsyncEngine,
) -> None:
    from core.engine import JournalOfGeneration

    journal = SqlHistoryJournal(engine)
    sid = f"s-{uuid.uuid4()}"
    await journal.append(sid, [_entry(i, text=str(i)) for i in range(10)])

    async def ahead(count: int) -> asyncio.Future[Any]:
        read: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        read.set_result(await journal.newest(sid, count=count))
        return read

    covered = JournalOfGeneration(journal, lambda _sid: 0, await ahead(4))
    await journal.append(sid, [_entry(10, text="after the read ahead")])  # the one-shot answer is the read's
    assert [e.seq for e in await covered.load(sid, from_seq=7)] == [7, 8, 9]
    assert [e.seq for e in await covered.load(sid, from_seq=7)] == [7, 8, 9, 10]  # later loads read the journal
    short = JournalOfGeneration(journal, lambda _sid: 0, await ahead(2))
    assert [e.seq for e in await short.load(sid, from_seq=5)] == list(range(5, 11))  # not covered: the range read

    async def failed() -> Any:
        raise RuntimeError("read ahead failed")

    assert [e.seq for e in await JournalOfGeneration(journal, lambda _sid: 0, failed()).load(sid, from_seq=9)] == [9, 10]
    await journal.aclose()
