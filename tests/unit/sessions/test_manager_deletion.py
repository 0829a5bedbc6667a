"""Manager: subtree deletion, event order, data clear, generations and the memory-clear cascade (SM-7, 21, 22, 23, 32)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from core.errors import Conflict, InvalidInput
from core.sessions.fields import SessionCreation
from core.sessions.manager import DELETION_CHUNK, SessionManager
from core.sessions.records import WorkBinding
from tests.fakes.session_repo import InMemorySessionRepository, RecordingEventSink

from .conftest import ClearLog, ManagerFactory, new_id


async def tree(manager: SessionManager) -> tuple[str, str, str, str]:
    """root → child → grandchild, plus a second child."""
    root = await manager.create_session({"id": new_id("root")})
    child = await manager.create_child_session(root.id, {"id": new_id("child")})
    grandchild = await manager.create_child_session(child.id, {"id": new_id("grand")})
    other = await manager.create_child_session(root.id, {"id": new_id("other")})
    return root.id, child.id, grandchild.id, other.id


@pytest.mark.rule("SM-21", "SM-32")
async def test_delete_removes_the_subtree_then_emits_deleted_then_clears_then_updates_the_parent(
    manager: SessionManager, sink: RecordingEventSink, repo: InMemorySessionRepository
) -> None:
    # SM-21, SM-32
    root, child, grandchild, other = await tree(manager)
    steps: list[str] = []

    async def clear(session_ids: Sequence[str]) -> None:
        for session_id in session_ids:
            assert manager.get_session(session_id) is None  # already out of the table
            assert (session_id, "session.deleted") in sink.pairs()  # its event is stored before its clear
            steps.append(f"clear {session_id}")

    manager.set_clear_session_data(clear)
    sink.clear()
    deleted = await manager.delete_session(child)
    assert deleted == [child, grandchild]
    assert manager.get_session(child) is None and manager.get_session(grandchild) is None
    assert child not in repo.sessions and grandchild not in repo.sessions
    assert sink.pairs() == [
        (grandchild, "session.deleted"),
        (child, "session.deleted"),
        (root, "session.updated"),
    ]
    assert steps == [f"clear {grandchild}", f"clear {child}"]
    assert manager.get_session(root).children == (other,)  # type: ignore[union-attr]


@pytest.mark.rule("SM-22")
async def test_generation_changes_synchronously_at_deletion_start_parents_before_children(
    manager: SessionManager, repo: InMemorySessionRepository
) -> None:
    # SM-22
    root, child, grandchild, other = await tree(manager)
    before = {sid: manager.generation_of(sid) for sid in (root, child, grandchild, other)}
    seen: list[tuple[str, int]] = []
    original = manager._table.bump_generation  # observe the order of the bumps

    def spy(session_id: str) -> int:
        value = original(session_id)
        seen.append((session_id, value))
        return value

    manager._table.bump_generation = spy  # type: ignore[method-assign]
    repo.gate = asyncio.Event()  # hold the deletion's write
    deletion = asyncio.ensure_future(manager.delete_session(root))
    assert manager.generation_of(root) == before[root]  # nothing happens before the task runs
    await asyncio.sleep(0)  # first step of the task: synchronous bump + wait marks
    assert all(manager.generation_of(s) != before[s] for s in before)
    assert manager.is_deleting(grandchild)
    order = [sid for sid, _ in seen]
    assert sorted(order) == sorted(before)
    assert order.index(root) < order.index(child) < order.index(grandchild)
    assert order.index(root) < order.index(other)
    assert manager.get_session(root) is not None  # the bump precedes the removal
    repo.gate.set()
    await deletion
    after = {sid: manager.generation_of(sid) for sid in before}
    refiled = await manager.ensure_session(root)
    assert refiled.id == root and manager.generation_of(root) == after[root]  # filing again keeps it


@pytest.mark.rule("SM-22")
async def test_generations_are_never_given_twice_and_survive_a_restart(
    manager: SessionManager, make_manager: ManagerFactory
) -> None:
    # SM-22
    sid = new_id()
    given = {manager.generation_of(sid)}
    for _ in range(3):
        await manager.ensure_session(sid)
        await manager.delete_session(sid)
        assert manager.generation_of(sid) not in given
        given.add(manager.generation_of(sid))
    stale = manager.generation_of(sid)
    await manager.ensure_session(sid)
    await manager.delete_session(sid)
    restarted = await make_manager()
    assert restarted.generation_of(sid) == manager.generation_of(sid) != stale
    await restarted.ensure_session(sid)
    await restarted.delete_session(sid)
    assert restarted.generation_of(sid) not in given | {stale, manager.generation_of(sid)}


@pytest.mark.rule("SM-22")
async def test_the_first_session_deleted_waits_once_for_everything_published_before_the_generation_changed(
    manager: SessionManager, sink: RecordingEventSink
) -> None:
    # A reply checked against the old generation just before the bump may still be in flight, and the
    # outbound and events streams store independently: the first session.deleted comes after a barrier
    # on everything sent before it. One barrier: what is sent after the bump is refused by its generation.
    root = await manager.create_session({"id": new_id("root")})
    for i in range(DELETION_CHUNK + 3):  # two chunks
        await manager.create_child_session(root.id, {"id": new_id(f"c{i}")})
    sink.clear()
    sink.barriers.clear()
    deleted = await manager.delete_session(root.id)
    assert len(deleted) == DELETION_CHUNK + 4
    assert sink.events[0].event_type == "session.deleted"
    assert sink.barriers == [0]


async def test_creating_under_a_session_being_deleted_is_refused(manager: SessionManager) -> None:
    # SM-21
    root = await manager.create_session()
    release = asyncio.Event()

    async def held(_ids: Sequence[str]) -> None:
        await release.wait()

    manager.set_clear_session_data(held)
    deletion = asyncio.create_task(manager.delete_session(root.id))
    await asyncio.sleep(0)
    with pytest.raises(Conflict):
        await manager.create_child_session(root.id)
    second = asyncio.create_task(manager.delete_session(root.id))  # a second delete waits for the first
    release.set()
    assert await deletion == [root.id]
    assert await second == []


@pytest.mark.rule("SM-7")
async def test_workspace_binding_and_current_dir_go_with_the_record_and_no_clear_touches_them(
    manager: SessionManager, repo: InMemorySessionRepository, make_manager: ManagerFactory
) -> None:
    # SM-7
    ws = (await manager.add_workspace("/srv/" + new_id("p"))).workspace
    assert ws.root is not None
    root = await manager.create_session(None, SessionCreation("cli", ws.id, WorkBinding(ws.root)))
    child = await manager.create_child_session(root.id)
    await manager.set_current_dir(root.id, ws.root + "/src")
    await manager.memory_clear(root.id, None, "session", history_cleared=True)
    kept = manager.get_session(root.id)
    assert kept is not None and (kept.workspace, kept.work, kept.current_dir) == (ws.id, WorkBinding(ws.root), ws.root + "/src")
    assert manager.get_session(child.id) is None
    restarted = await make_manager()
    assert restarted.get_session(root.id).current_dir == ws.root + "/src"  # type: ignore[union-attr]
    await restarted.delete_session(root.id)
    assert root.id not in repo.sessions


@pytest.mark.rule("SM-23")
async def test_history_clear_scope_session_deletes_this_sessions_children(
    manager: SessionManager, clear_log: ClearLog
) -> None:
    # SM-23
    root, child, grandchild, other = await tree(manager)
    elsewhere = await manager.create_child_session((await manager.create_session()).id)
    assert await manager.memory_clear(root, ["context", "media"], "session", history_cleared=True) == [
        child, grandchild, other
    ]
    assert manager.get_session(root) is not None
    assert manager.get_session(elsewhere.id) is not None
    assert set(clear_log.cleared) == {child, grandchild, other}


@pytest.mark.rule("SM-23")
async def test_history_clear_scope_all_deletes_every_child_session(manager: SessionManager) -> None:
    # SM-23
    root, child, grandchild, other = await tree(manager)
    second_root = await manager.create_session()
    second_child = await manager.create_child_session(second_root.id)
    deleted = await manager.memory_clear(root, None, "all", history_cleared=True)
    assert set(deleted) == {child, grandchild, other, second_child.id}
    assert {r.id for r in manager.list_sessions()} >= {root, second_root.id}
    assert all(r.parent_id is None for r in manager.list_sessions())


@pytest.mark.rule("SM-23")
@pytest.mark.parametrize(
    ("types", "history_cleared"),
    [(["media"], True), (["summary", "media"], True), (None, False), (["context"], False)],
)
async def test_other_types_or_a_failed_history_clear_delete_nothing(
    manager: SessionManager, types: list[str] | None, history_cleared: bool
) -> None:
    # SM-23
    root, child, grandchild, other = await tree(manager)
    assert await manager.memory_clear(root, types, "all", history_cleared) == []
    assert all(manager.get_session(s) is not None for s in (child, grandchild, other))


async def test_memory_clear_refuses_an_unknown_scope(manager: SessionManager) -> None:
    with pytest.raises(InvalidInput):
        await manager.memory_clear(new_id(), None, "everything", True)
