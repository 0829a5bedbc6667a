"""Manager: place records and workspaces, bindings (SM-28, 29, 30, 31, 35)."""

from __future__ import annotations

import pytest

from core.errors import InvalidInput, NotFound
from core.sessions.fields import SessionCreation
from core.sessions.manager import SessionManager
from core.sessions.records import WorkBinding
from tests.fakes.session_repo import InMemorySessionRepository, RecordingEventSink

from .conftest import FakeClock, ManagerFactory, new_id


@pytest.mark.rule("SM-28")
async def test_the_default_workspace_record_exists_from_start_and_places_list_default_first(
    manager: SessionManager, repo: InMemorySessionRepository
) -> None:
    # SM-28
    assert "workspace:default" in repo.places
    b = (await manager.add_workspace("/srv/" + new_id("b"))).workspace
    a = (await manager.add_workspace("/srv/" + new_id("a"))).workspace
    keys = [p.key for p in manager.list_places()]
    assert keys[0] == "workspace:default"
    assert keys[1:] == sorted([f"workspace:{a.id}", f"workspace:{b.id}"])


@pytest.mark.rule("SM-28")
async def test_update_place_merges_metadata_and_unknown_keys_are_refused(
    manager: SessionManager, clock: FakeClock, make_manager: ManagerFactory
) -> None:
    # SM-28
    await manager.update_place("workspace:default", {"settings": {"model": "a"}, "keep": 1})
    clock.advance(5)
    place = await manager.update_place("workspace:default", {"settings": {"persona": "b"}})
    assert place.metadata == {"settings": {"persona": "b"}, "keep": 1}
    assert place.updated_at > place.created_at
    with pytest.raises(NotFound):
        await manager.update_place("telegram:group:" + new_id(), {"x": 1})
    restarted = await make_manager()
    assert restarted.get_place("workspace:default").metadata == place.metadata  # type: ignore[union-attr]


@pytest.mark.rule("SM-28")
async def test_deleting_a_session_keeps_its_window(manager: SessionManager) -> None:
    # SM-28
    from core.sessions.incoming_message import ChatScope, IncomingMessage

    sid = new_id("tg")
    chat = ChatScope("group", "g-keep", True, name="Keep")
    await manager.record_inbound(IncomingMessage(id="m1", session_id=sid, platform="telegram", chat=chat))
    await manager.update_place("telegram:group:g-keep", {"layer": 1})
    await manager.delete_session(sid)
    assert manager.get_place("telegram:group:g-keep").metadata == {"layer": 1}  # type: ignore[union-attr]


@pytest.mark.rule("SM-29")
async def test_one_workspace_per_real_path_with_a_random_id_and_the_folder_name(manager: SessionManager) -> None:
    # SM-29
    path = "/srv/projects/" + new_id("repo")
    first = await manager.add_workspace(path)
    again = await manager.add_workspace(path)
    twin = await manager.add_workspace("/other/" + path.rsplit("/", 1)[1])
    assert not first.existed and again.existed and again.workspace == first.workspace
    assert first.workspace.name == path.rsplit("/", 1)[1] == twin.workspace.name  # duplicates allowed
    assert first.workspace.id not in path and first.workspace.id != twin.workspace.id
    with pytest.raises(InvalidInput):
        await manager.add_workspace("relative/path")


@pytest.mark.rule("SM-30")
async def test_list_workspaces_default_first_then_registration_order(manager: SessionManager) -> None:
    # SM-30
    paths = ["/srv/" + new_id(p) for p in ("zeta", "alpha", "mid")]
    for path in paths:
        await manager.add_workspace(path)
    listed = manager.list_workspaces()
    assert listed[0].id == "default" and listed[0].root is None
    assert [w.root for w in listed[1:]] == paths


@pytest.mark.rule("SM-31")
async def test_remove_workspace_detaches_its_sessions_and_clears_their_trees_current_dir(
    manager: SessionManager, sink: RecordingEventSink, repo: InMemorySessionRepository
) -> None:
    # SM-31
    path = "/srv/" + new_id("p")
    ws = (await manager.add_workspace(path)).workspace
    await manager.update_place(f"workspace:{ws.id}", {"x": 1})
    root = await manager.create_session(None, SessionCreation("webui", ws.id, WorkBinding(path)))
    child = await manager.create_child_session(root.id)
    await manager.set_current_dir(child.id, path + "/docs")
    unrelated = await manager.create_session(None, SessionCreation("webui"))
    await manager.set_current_dir(unrelated.id, "/tmp")
    sink.clear()
    changed = await manager.remove_workspace(ws.id)
    assert set(changed) == {root.id, child.id}
    r, c = manager.get_session(root.id), manager.get_session(child.id)
    assert r is not None and (r.workspace, r.work, r.current_dir) == (None, None, None)
    assert c is not None and c.current_dir is None
    assert manager.get_session(unrelated.id).current_dir == "/tmp"  # type: ignore[union-attr]
    assert sorted(sink.pairs()) == sorted([(root.id, "session.updated"), (child.id, "session.updated")])
    assert manager.place_of(root.id).key == "workspace:default"
    assert manager.get_place(f"workspace:{ws.id}") is None and ws.id not in repo.workspaces
    again = await manager.add_workspace(path)
    assert not again.existed and again.workspace.id != ws.id


@pytest.mark.rule("SM-31")
async def test_the_default_and_unknown_workspaces_cannot_be_removed(manager: SessionManager) -> None:
    # SM-31
    with pytest.raises(InvalidInput):
        await manager.remove_workspace("default")
    with pytest.raises(NotFound):
        await manager.remove_workspace(new_id("ws"))


@pytest.mark.rule("SM-35", "SM-5")
async def test_extra_roots_and_worktrees_are_written_on_the_project_root(
    manager: SessionManager, sink: RecordingEventSink
) -> None:
    # SM-35, SM-5
    path = "/srv/" + new_id("p")
    ws = (await manager.add_workspace(path)).workspace
    root = await manager.create_session(None, SessionCreation("cli", ws.id, WorkBinding(path)))
    child = await manager.create_child_session(root.id)
    sink.clear()
    await manager.set_extra_roots(child.id, ["/data/a", "/data/b", "/data/a"])
    await manager.add_worktree(child.id, path + "-wt1")
    await manager.add_worktree(root.id, path + "-wt1")
    r = manager.get_session(root.id)
    assert r is not None and r.work == WorkBinding(path, ("/data/a", "/data/b"), (path + "-wt1",))
    assert manager.get_session(child.id).work is None  # type: ignore[union-attr]
    assert {sid for sid, _ in sink.pairs()} == {root.id}
    plain = await manager.create_session()
    with pytest.raises(InvalidInput):
        await manager.set_extra_roots(plain.id, ["/x"])
    with pytest.raises(NotFound):
        await manager.add_worktree(new_id(), "/x")
