"""Two processes' session managers on one PostgreSQL database see the same records and registrations
(PostgreSQL is the source of truth; consumers/shared_state.py, core/store/change_feed.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from consumers.shared_state import SharedState
from core.sessions.directory import AddedWorkspace
from core.sessions.fields import SessionCreation
from core.sessions.incoming_message import ChatScope, IncomingMessage
from core.sessions.manager import SessionManager
from core.sessions.places import default_workspace_place
from core.sessions.platforms import AdapterInstance
from core.sessions.records import JsonObject
from core.store.change_feed import NotifyingSessionRepository
from core.store.db import create_db_engine
from core.store.migrate import migrate
from tests.waiting import wait_for


class NoEvents:
    async def emit(self, session_id: str, event_type: str, payload: JsonObject) -> None:
        return None

    async def emit_all(self, events: Sequence[tuple[str, str, JsonObject]]) -> None:
        return None

    async def stored_so_far(self) -> None:
        return None


@dataclass
class Process:
    """What one turnstile process holds: its own engine, manager and shared state."""

    engine: AsyncEngine
    manager: SessionManager
    shared: SharedState

    async def close(self) -> None:
        await self.manager.drain()
        await self.shared.close()
        await self.engine.dispose()


async def open_process(url: str, *, listen: bool = True) -> Process:
    origin = uuid.uuid4().hex
    engine = create_db_engine(url)
    manager = SessionManager(NotifyingSessionRepository(engine, origin=origin), NoEvents())
    shared = SharedState(engine, manager, origin)
    await shared.listen()  # as the service does: hear before loading
    await manager.start()
    await shared.start()
    if not listen:
        await shared.close()  # this process hears nothing: only its reads through can make it consistent
    return Process(engine, manager, shared)


@pytest.fixture
async def two(postgres_url: str) -> AsyncIterator[tuple[Process, Process]]:
    engine = create_db_engine(postgres_url)
    await migrate(engine)
    await engine.dispose()
    a, b = await open_process(postgres_url), await open_process(postgres_url)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


CLI = SessionCreation(created_from="cli")
DEFAULT = default_workspace_place(0.0)


@pytest.mark.postgres
async def test_a_record_one_process_writes_is_seen_by_the_other(two: tuple[Process, Process]) -> None:
    a, b = two
    root = await a.manager.create_session({"name": "shared root"}, CLI)
    seen = await wait_for(lambda: b.manager.get_session(root.id), what="the root in the other process")
    assert seen.name == "shared root" and seen.created_from == "cli"

    # A child filed by B under A's root: A sees it, and the root's record is A's, not an unfiled copy.
    child = await b.manager.create_child_session(root.id, {"name": "child of b"})
    await wait_for(lambda: a.manager.get_session(child.id), what="B's child in A")
    assert a.manager.get_children(root.id)[0].id == child.id
    assert a.manager.place_of(child.id) == a.manager.place_of(root.id)

    await a.manager.update_session(child.id, {"title": "renamed by a"})
    await wait_for(lambda: (b.manager.get_session(child.id) or root).title == "renamed by a", what="the update in B")

    before = b.manager.generation_of(child.id)
    assert await a.manager.delete_session(root.id) == [root.id, child.id]
    await wait_for(lambda: b.manager.get_session(root.id) is None and b.manager.get_session(child.id) is None,
                   what="the deletion in B")
    assert b.manager.generation_of(child.id) == a.manager.generation_of(child.id) != before


@pytest.mark.postgres
async def test_a_process_that_heard_nothing_reads_the_tree_through_before_judging(postgres_url: str) -> None:
    engine = create_db_engine(postgres_url)
    await migrate(engine)
    await engine.dispose()
    a, deaf = await open_process(postgres_url), await open_process(postgres_url, listen=False)
    try:
        root = await a.manager.create_session({"name": "made elsewhere"}, CLI)
        await a.manager.drain()
        await a.manager.install_external(lambda: _nothing())  # settles A's write behind
        child = await a.manager.create_child_session(root.id, {"name": "a's child"})
        assert deaf.manager.get_session(child.id) is None  # it heard nothing

        await deaf.shared.read_through(child.id)
        assert deaf.manager.get_session(root.id) is not None  # the whole chain up to the root
        assert deaf.manager.place_of(child.id) == a.manager.place_of(child.id)
        assert deaf.manager.can_take(child.id, root.id) == a.manager.can_take(child.id, root.id)

        # create_child under a parent written elsewhere keeps that parent's record (no unfiled copy).
        await deaf.shared.read_through(root.id)
        grandchild = await deaf.manager.create_child_session(child.id, {"name": "deaf's child"})
        fresh = await open_process(postgres_url)
        try:
            stored_root = fresh.manager.get_session(root.id)
            assert stored_root is not None and stored_root.name == "made elsewhere"
            assert fresh.manager.get_children(child.id)[0].id == grandchild.id
        finally:
            await fresh.close()
    finally:
        await a.close()
        await deaf.close()


async def _nothing() -> None:
    return None


@pytest.mark.postgres
async def test_a_platform_registration_is_persisted_and_seen_by_every_process(
    two: tuple[Process, Process], postgres_url: str
) -> None:
    a, b = two
    instance = AdapterInstance("tg-main", "telegram", "telegram", ("telegram:*",), {"group": True})
    await a.shared.register_platform(instance)
    await wait_for(lambda: b.manager.registry.claimants_of("telegram:42"), what="the registration in B")
    assert b.manager.registry.claimants_of("telegram:42") == [instance]

    later = await open_process(postgres_url)  # a process started later (or a restart) loads it
    try:
        assert later.manager.registry.instances() == [instance]
        assert await b.shared.unregister_platform("tg-main")
        await wait_for(lambda: not a.manager.registry.instances() and not later.manager.registry.instances(),
                       what="the unregistration everywhere")
    finally:
        await later.close()


async def test_on_sqlite_a_registration_outlives_the_process(sqlite_url: str) -> None:
    engine = create_db_engine(sqlite_url)
    await migrate(engine)
    await engine.dispose()
    first = await open_process(sqlite_url)
    instance = AdapterInstance("slack-1", "slack", claims=("slack:*",))
    try:
        assert not first.shared.shared  # SQLite: nothing to listen to
        await first.shared.register_platform(instance)
    finally:
        await first.close()
    restarted = await open_process(sqlite_url)
    try:
        assert restarted.manager.registry.instances() == [instance]
    finally:
        await restarted.close()


@pytest.mark.postgres
@pytest.mark.rule("SM-26")
async def test_a_chat_type_a_message_declared_one_to_one_is_known_to_every_process(
    two: tuple[Process, Process], postgres_url: str
) -> None:
    # SM-26 asks whether the window type is declared one-to-one: a message judged in A must count in B.
    a, b = two
    sid = f"tg:{uuid.uuid4().hex[:8]}"
    dm = ChatScope(type="private", target_id="42", multi_party=False, declared_one_to_one=True)
    assert not b.manager.registry.is_declared_one_to_one("telegram", "private")
    await a.manager.record_inbound(IncomingMessage(id="m1", session_id=sid, platform="telegram", chat=dm))
    assert a.manager.registry.is_declared_one_to_one("telegram", "private")
    await wait_for(lambda: b.manager.registry.is_declared_one_to_one("telegram", "private"),
                   what="the declaration in the other process")
    assert not b.manager.registry.is_declared_one_to_one("telegram", "group")
    await a.shared.flush()  # what is being written is written (a process that stops finishes it)
    late = await open_process(postgres_url)  # a process started afterwards loads it
    try:
        assert late.manager.registry.is_declared_one_to_one("telegram", "private")
    finally:
        await late.close()


async def test_on_sqlite_a_declared_one_to_one_chat_type_outlives_the_process(sqlite_url: str) -> None:
    engine = create_db_engine(sqlite_url)
    await migrate(engine)
    await engine.dispose()
    first = await open_process(sqlite_url)
    dm = ChatScope(type="im", target_id="7", multi_party=False, declared_one_to_one=True)
    try:
        await first.manager.record_inbound(IncomingMessage(id="m1", session_id="slack:im:7", platform="slack", chat=dm))
    finally:
        await first.close()
    restarted = await open_process(sqlite_url)
    try:
        assert restarted.manager.registry.is_declared_one_to_one("slack", "im")
    finally:
        await restarted.close()


@pytest.mark.postgres
async def test_place_and_workspace_writes_from_two_processes_at_once_lose_nothing(
    two: tuple[Process, Process], tmp_path: Path
) -> None:
    # What place.update / workspace.add run in (consumers/session_operations.py): one process at a time,
    # on every place and workspace read through, so neither merges onto a copy the other just changed.
    a, b = two

    async def update(p: Process, metadata: JsonObject) -> None:
        async with p.shared.directory_writes():
            await p.manager.update_place("workspace:default", metadata)

    async def add(p: Process, root: str) -> AddedWorkspace:
        async with p.shared.directory_writes():
            return await p.manager.add_workspace(root)

    for n in range(3):
        await asyncio.gather(update(a, {f"a{n}": n}), update(b, {f"b{n}": n}))
    wanted = {f"{who}{n}": n for who in "ab" for n in range(3)}
    for p in (a, b):
        await wait_for(lambda p=p: (p.manager.get_place("workspace:default") or DEFAULT).metadata == wanted,
                       what="every key of both processes' updates")

    root = str(tmp_path)
    first, second = await asyncio.gather(add(a, root), add(b, root))
    assert first.workspace.id == second.workspace.id  # one workspace per root, and no unique-key error
    assert sorted([first.existed, second.existed]) == [False, True]
