"""SqlSessionRepository on SQLite and PostgreSQL: round trips, upserts, atomicity, restarts (SM-7, 15, 22, 28)."""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import replace

import pytest
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from core.sessions.fields import SessionCreation
from core.sessions.incoming_message import ChatScope, IncomingMessage
from core.sessions.manager import SessionManager
from core.sessions.ports import StoreChange
from core.sessions.records import (
    LastTurn,
    OriginChat,
    PlaceRecord,
    SessionRecord,
    TakeSettings,
    TokenUsage,
    WorkBinding,
    WorkspaceRecord,
)
from core.store.db import create_db_engine, metadata
from core.store.session_repo import SqlSessionRepository
from core.store.session_tables import sessions_table
from tests.fakes.session_repo import RecordingEventSink


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def full_record(session_id: str) -> SessionRecord:
    return SessionRecord(
        id=session_id,
        created_at=1_793_620_800.25,
        updated_at=1_793_620_900.5,
        status="waiting",
        name="Name",
        title="Title",
        parent_id=None,
        created_from="webui",
        input_context="context",
        result="result",
        metadata={"settings": {"model": "m", "list": [1, 2.5, None, True]}, "中文": "值"},
        origin_platform="telegram",
        origin_chat=OriginChat("group", True, "g-1", "bot-a", "Team"),
        workspace="ws-1",
        work=WorkBinding("/srv/repo", ("/data",), ("/srv/repo-wt",)),
        current_dir="/srv/repo/src",
        origin_instance="tg-main",
        last_reply_at=1_793_620_850.0,
        last_turn=LastTurn("error", 1_793_620_860.0, "boom"),
        tokens=TokenUsage(120, 30),
        take_settings=TakeSettings("same-platform", True, False, True),
    )


async def test_every_field_round_trips(engine: AsyncEngine) -> None:
    repo = SqlSessionRepository(engine)
    record = full_record(uid("s"))
    child = SessionRecord(id=uid("c"), created_at=1.0, updated_at=2.0, parent_id=record.id)
    place = PlaceRecord("telegram:group:g-1", "window", 1.0, 2.0, name="Team", metadata={"layer": {"a": 1}})
    workspace = WorkspaceRecord(uid("ws"), 3, 4.0, name="repo", root="/srv/" + uid("repo"))
    await repo.apply(
        StoreChange(sessions=(record, child), places=(place,), workspaces=(workspace,), generations=((record.id, 7),))
    )
    state = await SqlSessionRepository(engine).load()
    loaded = {r.id: r for r in state.sessions}
    assert loaded[record.id] == record
    assert loaded[child.id] == replace(child, metadata={})
    assert state.places == (place,)
    assert state.workspaces == (workspace,)
    assert state.generations == ((record.id, 7),)


async def test_upserts_replace_rows_and_deletions_remove_them(engine: AsyncEngine) -> None:
    repo = SqlSessionRepository(engine)
    record = full_record(uid("s"))
    await repo.apply(StoreChange(sessions=(record,), generations=((record.id, 1),)))
    changed = replace(record, title="New", origin_chat=None, tokens=None, metadata={})
    await repo.apply(StoreChange(sessions=(changed,), generations=((record.id, 2),)))
    state = await repo.load()
    assert state.sessions == (changed,) and state.generations == ((record.id, 2),)
    await repo.apply(StoreChange(deleted_sessions=(record.id,)))
    assert (await repo.load()).sessions == ()


async def test_a_failing_change_writes_nothing(engine: AsyncEngine) -> None:
    repo = SqlSessionRepository(engine)
    root = "/srv/" + uid("same")
    await repo.apply(StoreChange(workspaces=(WorkspaceRecord(uid("ws"), 1, 1.0, root=root),)))
    record = full_record(uid("s"))
    duplicate_root = WorkspaceRecord(uid("ws"), 2, 2.0, root=root)
    with pytest.raises(IntegrityError):
        await repo.apply(StoreChange(sessions=(record,), workspaces=(duplicate_root,)))
    assert (await repo.load()).sessions == ()


@pytest.mark.rule("SM-3")
async def test_malformed_stored_origin_chat_reads_as_absent(engine: AsyncEngine) -> None:
    # SM-3: a chat of the wrong shape is dropped, never guessed from the id
    session_id = "telegram:group:" + uid("g")
    async with engine.begin() as conn:
        await conn.execute(
            insert(sessions_table).values(
                id=session_id, status="active", created_at=1.0, updated_at=1.0,
                origin_platform="telegram", origin_chat={"type": 5}, metadata_json=None,
            )
        )
    (record,) = (await SqlSessionRepository(engine).load()).sessions
    assert record.origin_platform == "telegram" and record.origin_chat is None


@pytest.mark.rule("SM-22", "SM-7", "SM-15", "SM-28")
async def test_a_restarted_service_keeps_generations_places_and_bindings(db_url: str, engine: AsyncEngine) -> None:
    # SM-22, SM-7, SM-15, SM-28
    first = SessionManager(SqlSessionRepository(engine), RecordingEventSink())
    await first.start()
    room = uid("tg")
    chat = ChatScope("group", uid("g"), True, name="Team")
    await first.record_inbound(IncomingMessage(id=uid("m"), session_id=room, platform="telegram", chat=chat))
    passed_before_deletion = first.generation_of(room)  # a message that passed record_inbound
    await first.add_usage(room, 10, 3)
    await first.update_place("workspace:default", {"layer": {"model": "m"}})
    ws = (await first.add_workspace("/srv/" + uid("repo"))).workspace
    assert ws.root is not None
    project = await first.create_session(None, SessionCreation("cli", ws.id, WorkBinding(ws.root)))
    await first.set_current_dir(project.id, ws.root + "/src")
    await first.delete_session(room)
    await first.record_inbound(IncomingMessage(id=uid("m"), session_id=room, platform="telegram", chat=chat))

    restart_engine = create_db_engine(db_url)
    try:
        second = SessionManager(SqlSessionRepository(restart_engine), RecordingEventSink())
        await second.start()
        # the stale message is still told apart after the restart
        assert second.generation_of(room) == first.generation_of(room) != passed_before_deletion
        assert second.get_session(room) is not None and second.get_session(room).tokens is None  # type: ignore[union-attr]
        assert second.get_place(f"telegram:group:{chat.target_id}") is not None
        assert second.get_place("workspace:default").metadata == {"layer": {"model": "m"}}  # type: ignore[union-attr]
        assert [w.id for w in second.list_workspaces()] == ["default", ws.id]
        reloaded = second.get_session(project.id)
        assert reloaded is not None and reloaded.work == WorkBinding(ws.root) and reloaded.current_dir == ws.root + "/src"
        await second.delete_session(room)
        assert second.generation_of(room) not in {passed_before_deletion, first.generation_of(room)}
    finally:
        await restart_engine.dispose()


async def test_absent_json_fields_are_sql_null_and_present_ones_json_text(engine: AsyncEngine) -> None:
    # The upsert binds its JSON columns itself (compiled once, run with exec_driver_sql): None must
    # stay SQL NULL as with the columns' own binding (none_as_null), values must read back as JSON.
    repo = SqlSessionRepository(engine)
    bare = SessionRecord(id=uid("s"), created_at=1.0, updated_at=2.0, metadata={"big": 2**70, "s": "ü"})
    await repo.apply(StoreChange(sessions=(bare,)))
    t = sessions_table
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(t.c.metadata_json, t.c.origin_chat.is_(None), t.c.work.is_(None), t.c.tokens.is_(None))
                .where(t.c.id == bare.id)
            )
        ).one()
    assert row[0] == {"big": 2**70, "s": "ü"}
    assert row[1] and row[2] and row[3]


async def test_a_moved_record_is_found_under_its_new_parent_and_workspace(engine: AsyncEngine) -> None:
    # On SQLite the upsert leaves the indexed columns out and a second statement sets them where they
    # changed: a move, a workspace set or cleared, must still land and be found through the indexes.
    repo = SqlSessionRepository(engine)
    record = replace(full_record(uid("s")), parent_id="p-old")
    kept = replace(full_record(uid("k")), parent_id="p-old")
    await repo.apply(StoreChange(sessions=(record, kept)))
    moved = replace(record, parent_id="p-new", workspace=None, status="active")
    await repo.apply(StoreChange(sessions=(moved, replace(kept, title="same place"))))
    t = sessions_table
    async with engine.connect() as conn:
        under_new = (await conn.execute(select(t.c.id).where(t.c.parent_id == "p-new"))).scalars().all()
        under_old = (await conn.execute(select(t.c.id).where(t.c.parent_id == "p-old"))).scalars().all()
        in_ws1 = (await conn.execute(select(t.c.id).where(t.c.workspace == "ws-1"))).scalars().all()
    assert under_new == [record.id] and under_old == [kept.id] and in_ws1 == [kept.id]
    loaded = {r.id: r for r in (await repo.load()).sessions}
    assert loaded[record.id] == moved
    assert loaded[kept.id] == replace(kept, title="same place")
    await repo.apply(StoreChange(sessions=(replace(moved, parent_id=None, workspace="ws-2"),)))
    assert {r.id: r for r in (await repo.load()).sessions}[record.id] == replace(moved, parent_id=None, workspace="ws-2")


def _wal_frames(watcher: sqlite3.Connection) -> int:
    """Pages written to the WAL since the last call: a PASSIVE checkpoint reports them, a TRUNCATE one
    (which reports 0 once it truncated) empties the WAL for the next call."""
    frames = int(watcher.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
    watcher.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return frames


async def test_a_record_write_that_keeps_its_place_dirties_no_index_page(sqlite_url: str) -> None:
    # A turn writes its session's record twice (status, last turn, tokens). SQLite rewrites an index
    # entry whenever an UPDATE names its column, changed or not: the whole-row upsert dirtied both
    # indexes' pages (parent, workspace) on every write, 16 KiB of WAL a message.
    engine = create_db_engine(sqlite_url)
    # Held open so that no pooled connection closing last checkpoints the WAL away between writes.
    watcher = sqlite3.connect(sqlite_url.split("///", 1)[1])
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
        repo = SqlSessionRepository(engine)
        record = replace(full_record(uid("s")), parent_id="p-1")
        await repo.apply(StoreChange(sessions=(record,)))
        _wal_frames(watcher)
        await repo.apply(StoreChange(sessions=(replace(record, status="active", tokens=TokenUsage(200, 40)),)))
        assert _wal_frames(watcher) == 1, "the turn's record write dirtied more than the row's page"
        await repo.apply(StoreChange(sessions=(replace(record, parent_id="p-2", workspace="ws-2"),)))
        assert _wal_frames(watcher) == 3, "a move rewrites the row and both index entries"
    finally:
        watcher.close()
        await engine.dispose()
