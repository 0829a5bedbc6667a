"""Manager: creation, filing by id, updates, completion and listing (SM-1, 4, 5, 6, 8, 19, 20, 32, 33, 34)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.errors import Conflict, InvalidInput, NotFound
from core.sessions.fields import SessionCreation, SessionFields
from core.sessions.manager import SessionManager
from core.sessions.records import WorkBinding
from tests.fakes.session_repo import InMemorySessionRepository, RecordingEventSink

from .conftest import ManagerFactory, new_id


@pytest.mark.rule("SM-1")
async def test_kind_is_recomputed_on_create_and_load_never_taken_from_input_or_storage(
    manager: SessionManager, make_manager: ManagerFactory, repo: InMemorySessionRepository
) -> None:
    # SM-1
    root = await manager.create_session({"id": new_id(), "kind": "room"})
    child = await manager.create_child_session(root.id, {"kind": "owner"})
    assert (root.kind, child.kind) == ("owner", "task")
    repo.sessions[root.id] = replace(repo.sessions[root.id], kind="task", origin_platform="telegram")
    restarted = await make_manager()
    reloaded = restarted.get_session(root.id)
    assert reloaded is not None and reloaded.kind == "room"


@pytest.mark.rule("SM-8")
async def test_service_owned_fields_are_dropped_from_session_fields(manager: SessionManager) -> None:
    # SM-8
    owned = {
        "kind": "room",
        "origin_platform": "telegram",
        "origin_chat": {"type": "group", "multi_party": True, "target_id": "g"},
        "created_from": "webui",
        "workspace": "ws",
        "work": {"root": "/x"},
        "current_dir": "/x",
        "origin_instance": "tg-1",
        "last_reply_at": 1.0,
        "last_turn": {"outcome": "replied", "ended_at": 1.0},
        "tokens": {"input": 5, "output": 5},
    }
    root = await manager.create_session({"name": "kept", **owned})
    child = await manager.create_child_session(root.id, dict(owned))
    ensured = await manager.ensure_session(new_id(), dict(owned))
    for record in (root, child, ensured):
        assert record.origin_platform is None and record.origin_chat is None and record.created_from is None
        assert record.workspace is None and record.work is None and record.current_dir is None
        assert record.origin_instance is None and record.last_reply_at is None
        assert record.last_turn is None and record.tokens is None
    assert root.name == "kept"


async def test_unknown_session_fields_are_refused(manager: SessionManager) -> None:
    with pytest.raises(InvalidInput):
        await manager.create_session({"colour": "red"})
    with pytest.raises(InvalidInput):
        await manager.create_session({"status": "sleeping"})


@pytest.mark.rule("SM-19")
async def test_metadata_is_stored_as_is_and_title_inside_it_is_not_the_title(manager: SessionManager) -> None:
    # SM-19
    metadata = {"title": "not the title", "input_context": "not the context", "nested": {"a": [1, 2]}}
    for record in (
        await manager.create_session({"metadata": metadata}),
        await manager.ensure_session(new_id(), {"metadata": metadata}),
        await manager.create_child_session(new_id(), {"metadata": metadata}),
    ):
        assert record.metadata == metadata
        assert record.title is None and record.input_context is None


@pytest.mark.rule("SM-20", "SM-32")
async def test_update_merges_metadata_top_level_and_emits_updated(
    manager: SessionManager, sink: RecordingEventSink
) -> None:
    # SM-20, SM-32
    record = await manager.create_session({"metadata": {"a": {"x": 1}, "b": 2}})
    sink.clear()
    updated = await manager.update_session(record.id, {"metadata": {"a": {"y": 3}, "c": 4}, "kind": "room"})
    assert updated.metadata == {"a": {"y": 3}, "b": 2, "c": 4}
    assert updated.kind == "owner"
    assert sink.pairs() == [(record.id, "session.updated")]
    session_json = sink.events[0].payload["session"]
    assert isinstance(session_json, dict) and session_json["metadata"] == updated.metadata


@pytest.mark.rule("SM-4")
async def test_created_from_is_written_only_through_the_creation_argument(manager: SessionManager) -> None:
    # SM-4
    root = await manager.create_session({"name": "x"}, SessionCreation("webui"))
    assert root.created_from == "webui"
    with pytest.raises(InvalidInput):
        await manager.create_session({"parent_id": root.id}, SessionCreation("cli"))
    with pytest.raises(InvalidInput):
        await manager.ensure_session(new_id(), {"parent_id": root.id}, SessionCreation("cli"))


@pytest.mark.rule("SM-4")
async def test_ensure_backfills_created_from_only_on_an_unfiled_record(
    manager: SessionManager, sink: RecordingEventSink, repo: InMemorySessionRepository
) -> None:
    # SM-4
    unfiled = await manager.ensure_session(new_id())
    filed = await manager.create_session(None, SessionCreation("webui"))
    sink.clear()
    backfilled = await manager.ensure_session(unfiled.id, None, SessionCreation("cli"))
    untouched = await manager.ensure_session(filed.id, None, SessionCreation("cli"))
    assert backfilled.created_from == "cli" and repo.sessions[unfiled.id].created_from == "cli"
    assert untouched.created_from == "webui"
    assert sink.pairs() == [(unfiled.id, "session.updated")]
    again = await manager.ensure_session(unfiled.id, None, SessionCreation("webui"))
    assert again.created_from == "cli"


@pytest.mark.rule("SM-5")
async def test_workspace_and_binding_rules_at_creation(manager: SessionManager) -> None:
    # SM-5
    project = (await manager.add_workspace("/srv/" + new_id("repo"))).workspace
    assert project.root is not None
    bound = await manager.create_session(None, SessionCreation("webui", project.id, WorkBinding(project.root)))
    assert (bound.workspace, bound.work) == (project.id, WorkBinding(project.root))
    default = await manager.create_session(None, SessionCreation("webui", "default"))
    assert default.workspace is None  # the default workspace is not stored
    with pytest.raises(NotFound):
        await manager.create_session(None, SessionCreation("webui", "no-such-workspace"))
    with pytest.raises(InvalidInput):
        await manager.create_session(None, SessionCreation("webui", project.id))  # project needs work.root
    with pytest.raises(InvalidInput):
        await manager.create_session(None, SessionCreation("webui", None, WorkBinding("/srv/x")))
    child = await manager.create_child_session(bound.id)
    assert child.workspace is None and child.work is None  # only roots carry them
    assert manager.place_of(child.id).key == f"workspace:{project.id}"


@pytest.mark.rule("SM-6")
async def test_current_dir_is_not_set_at_creation_and_a_child_copies_its_parent_once(manager: SessionManager) -> None:
    # SM-6
    root = await manager.create_session()
    assert root.current_dir is None
    await manager.set_current_dir(root.id, "/work/a")
    child = await manager.create_child_session(root.id)
    assert child.current_dir == "/work/a"
    await manager.set_current_dir(root.id, "/work/b")
    assert manager.get_session(child.id).current_dir == "/work/a"  # type: ignore[union-attr]
    await manager.set_current_dir(child.id, "/work/c")
    assert manager.get_session(root.id).current_dir == "/work/b"  # type: ignore[union-attr]


@pytest.mark.rule("SM-33", "SM-32")
async def test_complete_session_stores_the_result_and_emits_completed(
    manager: SessionManager, sink: RecordingEventSink
) -> None:
    # SM-33, SM-32
    record = await manager.create_session()
    sink.clear()
    done = await manager.complete_session(record.id, "the answer")
    assert (done.status, done.result) == ("completed", "the answer")
    assert sink.pairs() == [(record.id, "session.completed")]
    assert sink.events[0].payload["result"] == "the answer"


@pytest.mark.rule("SM-34", "SM-32")
async def test_children_listing_and_titles(manager: SessionManager, sink: RecordingEventSink) -> None:
    # SM-34, SM-32
    root = await manager.create_session({"id": new_id("root")})
    sink.clear()
    first = await manager.create_child_session(root.id, {"name": "first"})
    second = await manager.create_session(SessionFields(parent_id=root.id, status="waiting"))
    assert sink.pairs() == [
        (first.id, "session.created"),
        (root.id, "session.updated"),
        (second.id, "session.created"),
        (root.id, "session.updated"),
    ]
    assert [c.id for c in manager.get_children(root.id)] == [first.id, second.id]
    assert manager.get_session(root.id).children == (first.id, second.id)  # type: ignore[union-attr]
    assert root.id in {r.id for r in manager.list_sessions(parent_id=None)}
    assert {r.id for r in manager.list_sessions(parent_id=root.id)} == {first.id, second.id}
    assert [r.id for r in manager.list_sessions(parent_id=root.id, status="waiting")] == [second.id]
    assert len(manager.list_sessions()) == 3
    titled = await manager.update_session_title(first.id, "Plan")
    assert titled.title == "Plan" and manager.get_session("nope") is None


@pytest.mark.rule("SM-34")
async def test_create_child_files_a_missing_parent_by_id_as_an_unfiled_root(
    manager: SessionManager, sink: RecordingEventSink
) -> None:
    # SM-34
    parent_id = new_id("parent")
    child = await manager.create_child_session(parent_id)
    parent = manager.get_session(parent_id)
    assert parent is not None and parent.children == (child.id,)
    assert parent.origin_platform is None and parent.created_from is None
    assert sink.pairs()[0] == (parent_id, "session.created")


async def test_refusals(manager: SessionManager) -> None:
    record = await manager.create_session({"id": new_id()})
    with pytest.raises(Conflict):
        await manager.create_session({"id": record.id})
    with pytest.raises(NotFound):
        await manager.create_session({"parent_id": new_id()})
    with pytest.raises(NotFound):
        await manager.update_session(new_id(), {"title": "x"})
    with pytest.raises(NotFound):
        await manager.complete_session(new_id())
    with pytest.raises(NotFound):
        await manager.delete_session(new_id())
