"""The control API over a real nats-server: every session-area operation, its result and its refusals."""

from __future__ import annotations

import os
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.control import CONTROL_REQUESTS
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def ok(nc: Client, subjects: Subjects, resource: str, verb: str, body: dict[str, Any]) -> Any:
    reply = await api(nc, subjects, resource, verb, body)
    assert reply["ok"], reply
    return reply["result"]


async def refused(nc: Client, subjects: Subjects, resource: str, verb: str, body: dict[str, Any] | bytes) -> str:
    reply = await api(nc, subjects, resource, verb, body)
    assert reply["ok"] is False, reply
    error = reply["error"]
    assert set(error) == {"code", "message"} and error["message"], error
    assert "Traceback" not in error["message"]
    return str(error["code"])


async def test_every_documented_operation_answers(service: TurnstileService, nc: Client, subjects: Subjects) -> None:
    # Each operation is subscribed: an empty body is answered (ok or a clear refusal), never a timeout.
    for name in CONTROL_REQUESTS:
        resource, verb = name.split(".")
        reply = await api(nc, subjects, resource, verb, b"")
        assert isinstance(reply["ok"], bool), (name, reply)
        if not reply["ok"]:
            assert reply["error"]["code"] in {"invalid", "not_found"}, (name, reply)


async def test_bad_requests_are_refused_with_a_code(service: TurnstileService, nc: Client, subjects: Subjects) -> None:
    assert await refused(nc, subjects, "session", "get", b"{nope") == "bad_json"
    assert await refused(nc, subjects, "session", "get", {"session_id": ""}) == "invalid"
    assert await refused(nc, subjects, "session", "get", {"session_id": "x", "typo": 1}) == "invalid"
    assert await refused(nc, subjects, "session", "get", {"session_id": uid("none")}) == "not_found"
    assert await refused(nc, subjects, "session", "list", {"status": "sleeping"}) == "invalid"


@pytest.mark.rule("SM-1", "SM-2", "SM-4", "SM-8", "SM-19", "SM-34")
async def test_create_drops_service_owned_fields_and_renders_the_label(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = uid("root")
    fields = {
        "id": sid,
        "title": "t",
        "metadata": {"title": "meta-title", "input_context": "meta-ctx", "k": [1, 2]},
        # SM-8: accepted on the wire, silently dropped.
        "kind": "task",
        "origin_platform": "telegram",
        "created_from": "forged",
        "current_dir": "/etc",
        "tokens": {"input": 99, "output": 99},
        "last_reply_at": 1.0,
    }
    got = await ok(nc, subjects, "session", "create", {"fields": fields, "creation": {"created_from": "webui"}})
    assert got["id"] == sid and got["title"] == "t"
    assert got["kind"] == "owner"  # SM-1: no parent, no origin platform
    assert got["origin_platform"] is None and got["current_dir"] is None and got["tokens"] is None  # SM-8
    assert got["last_reply_at"] is None
    assert got["created_from"] == "webui"  # SM-4: only through the creation argument
    # SM-19: metadata stored as is; its title/input_context are not the fields.
    assert got["metadata"] == {"title": "meta-title", "input_context": "meta-ctx", "k": [1, 2]}
    assert got["input_context"] is None
    # SM-2: default label, rendered in en and zh in the service time zone (UTC in tests).
    label = got["label"]
    assert label["en"].startswith("Session ") and label["zh"].startswith("会话 ") and label["source"] == label["en"]
    assert await refused(nc, subjects, "session", "create", {"fields": {"id": sid}}) == "conflict"
    named = await ok(nc, subjects, "session", "create", {"fields": {"name": "Plans"}})
    assert named["label"] == {"source": "Plans", "en": "Plans", "zh": "Plans"}
    assert (await ok(nc, subjects, "session", "get", {"session_id": sid}))["created_from"] == "webui"


@pytest.mark.rule("SM-4", "SM-5")
async def test_creation_argument_rules_refuse_without_writing(
    service: TurnstileService, nc: Client, subjects: Subjects, tmp_path: Path
) -> None:
    parent = (await ok(nc, subjects, "session", "create", {}))["id"]
    before = await ok(nc, subjects, "session", "list", {})
    # SM-4: a child with a creation argument is an error.
    body = {"fields": {"parent_id": parent}, "creation": {"created_from": "cli"}}
    assert await refused(nc, subjects, "session", "create", body) == "invalid"
    # SM-5: unknown workspace; default workspace with a binding; project workspace without work.root.
    body = {"creation": {"created_from": "cli", "workspace": "nope"}}
    assert await refused(nc, subjects, "session", "create", body) == "not_found"
    body = {"creation": {"created_from": "cli", "work": {"root": "/tmp"}}}
    assert await refused(nc, subjects, "session", "create", body) == "invalid"
    ws = (await ok(nc, subjects, "workspace", "add", {"root": str(tmp_path)}))["workspace"]
    body = {"creation": {"created_from": "cli", "workspace": ws["id"]}}
    assert await refused(nc, subjects, "session", "create", body) == "invalid"
    assert await refused(nc, subjects, "session", "create", {"creation": {"created_from": ""}}) == "invalid"
    assert await refused(nc, subjects, "session", "create", {"fields": {"parent_id": uid("none")}}) == "not_found"
    # Nothing was half-written by any refusal.
    assert await ok(nc, subjects, "session", "list", {}) == before
    # SM-5: the default workspace is not stored; a project session keeps workspace and binding.
    plain = await ok(nc, subjects, "session", "create", {"creation": {"created_from": "cli", "workspace": "default"}})
    assert plain["workspace"] is None and plain["work"] is None
    body = {"creation": {"created_from": "cli", "workspace": ws["id"], "work": {"root": str(tmp_path)}}}
    project = await ok(nc, subjects, "session", "create", body)
    assert project["workspace"] == ws["id"]
    assert project["work"] == {"root": str(tmp_path), "extra_roots": [], "worktrees": []}


@pytest.mark.rule("SM-4", "SM-18", "SM-34")
async def test_create_child_ensure_children_and_list(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    root = (await ok(nc, subjects, "session", "create", {}))["id"]
    child = await ok(nc, subjects, "session", "create_child", {"parent_id": root, "fields": {"name": "c1"}})
    assert child["parent_id"] == root and child["kind"] == "task"
    assert child["label"]["en"] == "c1"
    unnamed = await ok(nc, subjects, "session", "create_child", {"parent_id": root})
    assert unnamed["label"]["en"].startswith("Subtask ") and unnamed["label"]["zh"].startswith("子任务 ")
    # SM-34: a child of an unknown parent files the parent by id first.
    orphan_parent = uid("filed")
    await ok(nc, subjects, "session", "create_child", {"parent_id": orphan_parent})
    assert (await ok(nc, subjects, "session", "get", {"session_id": orphan_parent}))["created_from"] is None
    body = {"parent_id": root, "fields": {"parent_id": "other"}}
    assert await refused(nc, subjects, "session", "create_child", body) == "invalid"

    kids = await ok(nc, subjects, "session", "children", {"session_id": root})
    assert [k["id"] for k in kids] == [child["id"], unnamed["id"]]
    assert (await ok(nc, subjects, "session", "get", {"session_id": root}))["children"] == [child["id"], unnamed["id"]]
    assert await refused(nc, subjects, "session", "children", {"session_id": uid("none")}) == "not_found"
    listed = await ok(nc, subjects, "session", "list", {"parent_id": root})
    assert [k["id"] for k in listed] == [child["id"], unnamed["id"]]
    roots = {r["id"] for r in await ok(nc, subjects, "session", "list", {"roots_only": True})}
    assert root in roots and child["id"] not in roots
    assert await refused(nc, subjects, "session", "list", {"roots_only": True, "parent_id": root}) == "invalid"

    # SM-4 / SM-18: ensure files a missing id; on an existing unfiled root it backfills created_from once.
    filed = uid("ensure")
    first = await ok(nc, subjects, "session", "ensure", {"session_id": filed, "fields": {"title": "x"}})
    assert first["title"] == "x" and first["created_from"] is None
    again = await ok(nc, subjects, "session", "ensure", {"session_id": filed, "creation": {"created_from": "cli"}})
    assert again["created_from"] == "cli"
    kept = await ok(nc, subjects, "session", "ensure", {"session_id": filed, "creation": {"created_from": "webui"}})
    assert kept["created_from"] == "cli"
    body = {"session_id": filed, "fields": {"id": "someone-else"}}
    assert await refused(nc, subjects, "session", "ensure", body) == "invalid"


@pytest.mark.rule("SM-20", "SM-33", "SM-34")
async def test_update_title_complete_and_status_filter(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = (await ok(nc, subjects, "session", "create", {"fields": {"metadata": {"a": {"x": 1}, "b": 1}}}))["id"]
    # SM-20: top-level metadata keys are replaced whole; service-owned fields are dropped.
    body = {"session_id": sid, "changes": {"metadata": {"a": {"y": 2}}, "name": "n", "kind": "room"}}
    changed = await ok(nc, subjects, "session", "update", body)
    assert changed["metadata"] == {"a": {"y": 2}, "b": 1} and changed["name"] == "n" and changed["kind"] == "owner"
    body = {"session_id": sid, "changes": {"status": "bogus"}}
    assert await refused(nc, subjects, "session", "update", body) == "invalid"
    body = {"session_id": uid("none"), "changes": {"name": "x"}}
    assert await refused(nc, subjects, "session", "update", body) == "not_found"
    assert (await ok(nc, subjects, "session", "title", {"session_id": sid, "title": "T"}))["title"] == "T"
    assert await refused(nc, subjects, "session", "title", {"session_id": uid("none"), "title": "T"}) == "not_found"
    # SM-33: completed with its result.
    done = await ok(nc, subjects, "session", "complete", {"session_id": sid, "result": "42"})
    assert done["status"] == "completed" and done["result"] == "42"
    assert await refused(nc, subjects, "session", "complete", {"session_id": uid("none")}) == "not_found"
    completed = {s["id"] for s in await ok(nc, subjects, "session", "list", {"status": "completed"})}
    active = {s["id"] for s in await ok(nc, subjects, "session", "list", {"status": "active"})}
    assert sid in completed and sid not in active


@pytest.mark.rule("SM-6", "SM-35")
async def test_current_dir_extra_roots_and_worktrees(
    service: TurnstileService, nc: Client, subjects: Subjects, tmp_path: Path
) -> None:
    ws = (await ok(nc, subjects, "workspace", "add", {"root": str(tmp_path)}))["workspace"]
    body = {"creation": {"created_from": "cli", "workspace": ws["id"], "work": {"root": str(tmp_path)}}}
    root = (await ok(nc, subjects, "session", "create", body))["id"]
    # SM-6: not written at creation; a child copies the parent's value once, then each changes alone.
    await ok(nc, subjects, "session", "set_current_dir", {"session_id": root, "current_dir": "/a"})
    child = await ok(nc, subjects, "session", "create_child", {"parent_id": root})
    assert child["current_dir"] == "/a"
    await ok(nc, subjects, "session", "set_current_dir", {"session_id": child["id"], "current_dir": "/b"})
    assert (await ok(nc, subjects, "session", "get", {"session_id": root}))["current_dir"] == "/a"
    body = {"session_id": root, "current_dir": ""}
    assert await refused(nc, subjects, "session", "set_current_dir", body) == "invalid"
    # SM-35: set through a child, written on the project root.
    roots = await ok(nc, subjects, "session", "set_extra_roots", {"session_id": child["id"], "extra_roots": ["/x", "/x"]})
    assert roots["id"] == root and roots["work"]["extra_roots"] == ["/x"]
    tree = await ok(nc, subjects, "session", "add_worktree", {"session_id": child["id"], "path": "/wt1"})
    assert tree["id"] == root and tree["work"]["worktrees"] == ["/wt1"]
    plain = (await ok(nc, subjects, "session", "create", {}))["id"]
    body = {"session_id": plain, "extra_roots": ["/x"]}
    assert await refused(nc, subjects, "session", "set_extra_roots", body) == "invalid"
    body = {"session_id": uid("none"), "path": "/wt"}
    assert await refused(nc, subjects, "session", "add_worktree", body) == "not_found"


@pytest.mark.rule("SM-24")
async def test_take_check_follows_the_per_session_settings(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    a = (await ok(nc, subjects, "session", "create", {"creation": {"created_from": "webui"}}))["id"]
    b = (await ok(nc, subjects, "session", "create", {"creation": {"created_from": "webui"}}))["id"]
    unfiled = (await ok(nc, subjects, "session", "create", {}))["id"]
    assert await ok(nc, subjects, "take", "check", {"current_id": a, "target_id": a}) == {"ok": True, "reason": None}
    verdict = await ok(nc, subjects, "take", "check", {"current_id": a, "target_id": unfiled})
    assert verdict["ok"] is False and verdict["reason"]["source"].startswith("It cannot be told")
    # SM-24: default scope `session` denies, with a rendered reason; the settings are per session.
    verdict = await ok(nc, subjects, "take", "check", {"current_id": a, "target_id": b})
    assert verdict["ok"] is False and verdict["reason"]["zh"] == "这个会话只能取它自己的东西。"
    settings = {"scope": "all", "read_others_dms": True}
    await ok(nc, subjects, "session", "take_settings", {"session_id": a, "settings": settings})
    assert (await ok(nc, subjects, "session", "get", {"session_id": a}))["take_settings"]["scope"] == "all"
    assert (await ok(nc, subjects, "take", "check", {"current_id": a, "target_id": b}))["ok"] is True
    await ok(nc, subjects, "session", "take_settings", {"session_id": a, "settings": None})
    assert (await ok(nc, subjects, "take", "check", {"current_id": a, "target_id": b}))["ok"] is False
    body = {"session_id": a, "settings": {"scope": "everything"}}
    assert await refused(nc, subjects, "session", "take_settings", body) == "invalid"
    body = {"current_id": a, "target_id": b, "principal": {"platform": "cli"}}
    assert await refused(nc, subjects, "take", "check", body) == "invalid"


@pytest.mark.rule("SM-27", "SM-28")
async def test_places_of_rooms_and_workspaces(service: TurnstileService, nc: Client, subjects: Subjects) -> None:
    sid = uid("room")
    chat = {"type": "group", "target_id": "g-" + sid, "multi_party": True, "name": "Team"}
    replies = await Collector().attach(nc, subjects.outbound("im", sid))
    await publish_inbound(nc, subjects, inbound(sid, "hi", platform="im", chat=chat))
    await wait_for(lambda: replies.messages, what="the room's reply")
    # SM-27: a room's place is its window platform:type:target; SM-28: the window record was created, named.
    where = await ok(nc, subjects, "place", "of", {"session_id": sid})
    key = f"im:group:g-{sid}"
    assert where["kind"] == "window" and where["key"] == key
    assert where["place"]["name"] == "Team" and where["place"]["label"]["en"] == "Team"
    # SM-27: an unknown id or plain session is in the default workspace.
    default = await ok(nc, subjects, "place", "of", {"session_id": uid("nobody")})
    assert default["key"] == "workspace:default"
    assert default["place"]["label"] == {"source": "Default workspace", "en": "Default workspace", "zh": "默认工作区"}
    # SM-28: list puts the default first; update merges top-level metadata; unknown key → not_found.
    keys = [p["key"] for p in await ok(nc, subjects, "place", "list", {})]
    assert keys[0] == "workspace:default" and key in keys and keys[1:] == sorted(keys[1:])
    await ok(nc, subjects, "place", "update", {"key": key, "metadata": {"a": {"x": 1}, "b": 2}})
    place = await ok(nc, subjects, "place", "update", {"key": key, "metadata": {"a": {"y": 1}}})
    assert place["metadata"] == {"a": {"y": 1}, "b": 2}
    assert (await ok(nc, subjects, "place", "get", {"key": key}))["metadata"] == {"a": {"y": 1}, "b": 2}
    assert await refused(nc, subjects, "place", "get", {"key": "im:group:nope"}) == "not_found"
    assert await refused(nc, subjects, "place", "update", {"key": "im:group:nope", "metadata": {}}) == "not_found"
    assert await refused(nc, subjects, "place", "update", {"key": key, "metadata": [1]}) == "invalid"
    # SM-28: deleting the session keeps its place.
    await ok(nc, subjects, "session", "delete", {"session_id": sid})
    assert (await ok(nc, subjects, "place", "get", {"key": key}))["name"] == "Team"


@pytest.mark.rule("SM-29", "SM-30", "SM-31")
async def test_workspaces_are_validated_real_paths_and_removal_detaches_sessions(
    service: TurnstileService, nc: Client, subjects: Subjects, tmp_path: Path
) -> None:
    real = tmp_path / "proj"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    # The API is SM-29's validation point: not absolute, not a directory → invalid, nothing written.
    assert await refused(nc, subjects, "workspace", "add", {"root": "relative/dir"}) == "invalid"
    assert await refused(nc, subjects, "workspace", "add", {"root": str(tmp_path / "missing")}) == "invalid"
    (tmp_path / "file").write_text("x")
    assert await refused(nc, subjects, "workspace", "add", {"root": str(tmp_path / "file")}) == "invalid"
    assert [w["id"] for w in await ok(nc, subjects, "workspace", "list", {})] == ["default"]

    added = await ok(nc, subjects, "workspace", "add", {"root": str(link)})
    ws = added["workspace"]
    assert added["existed"] is False and ws["root"] == os.path.realpath(real) and ws["name"] == "proj"  # noqa: ASYNC240 (resolves a link in the test's tmp_path)
    assert ws["id"] not in {"proj", str(real)}  # a random id, not derived from the path
    again = await ok(nc, subjects, "workspace", "add", {"root": str(real)})
    assert again == {"workspace": ws, "existed": True}  # one workspace per real path
    other = tmp_path / "b" / "proj"
    other.mkdir(parents=True)
    second = (await ok(nc, subjects, "workspace", "add", {"root": str(other)}))["workspace"]
    assert second["name"] == "proj"  # duplicate names allowed
    listed = await ok(nc, subjects, "workspace", "list", {})
    assert [w["id"] for w in listed] == ["default", ws["id"], second["id"]]  # SM-30
    assert listed[0]["label"]["zh"] == "默认工作区"

    body = {"creation": {"created_from": "cli", "workspace": ws["id"], "work": {"root": ws["root"]}}}
    root = (await ok(nc, subjects, "session", "create", body))["id"]
    await ok(nc, subjects, "session", "set_current_dir", {"session_id": root, "current_dir": "/r"})
    child = (await ok(nc, subjects, "session", "create_child", {"parent_id": root}))["id"]
    assert (await ok(nc, subjects, "place", "of", {"session_id": child}))["key"] == f"workspace:{ws['id']}"
    events = await Collector().attach(nc, f"{subjects.prefix}.events.*.session.updated")
    removed = await ok(nc, subjects, "workspace", "remove", {"workspace_id": ws["id"]})
    assert set(removed["changed_sessions"]) == {root, child}
    # SM-31: the root loses workspace and binding, the tree's current_dir is cleared, each emits an update.
    got = await ok(nc, subjects, "session", "get", {"session_id": root})
    assert got["workspace"] is None and got["work"] is None and got["current_dir"] is None
    assert (await ok(nc, subjects, "session", "get", {"session_id": child}))["current_dir"] is None
    await wait_for(lambda: {e["session_id"] for e in events.json()} >= {root, child}, what="updates of the tree")
    assert (await ok(nc, subjects, "place", "of", {"session_id": child}))["key"] == "workspace:default"
    assert os.path.isdir(real)  # noqa: ASYNC240 (a stat of the test's tmp_path: no files touched)
    assert await refused(nc, subjects, "workspace", "remove", {"workspace_id": ws["id"]}) == "not_found"
    assert await refused(nc, subjects, "workspace", "remove", {"workspace_id": "default"}) == "invalid"
    readded = (await ok(nc, subjects, "workspace", "add", {"root": str(real)}))["workspace"]
    assert readded["id"] != ws["id"]


async def test_platforms_register_list_and_unregister(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    assert await ok(nc, subjects, "platform", "list", {}) == []
    body = {"instance_id": "tg-1", "platform": "tg", "type": "bot", "claims": ["tg:*"], "chat_scopes": {"group": True}}
    assert await ok(nc, subjects, "platform", "register", body) == body
    listed = await ok(nc, subjects, "platform", "list", {})
    assert listed == [body]
    assert await refused(nc, subjects, "platform", "register", {"instance_id": "x", "platform": "a.b"}) == "invalid"
    assert await refused(nc, subjects, "platform", "register", {"instance_id": "", "platform": "tg"}) == "invalid"
    assert await ok(nc, subjects, "platform", "unregister", {"instance_id": "tg-1"}) == {
        "instance_id": "tg-1",
        "existed": True,
    }
    assert await refused(nc, subjects, "platform", "unregister", {"instance_id": "tg-1"}) == "not_found"
    assert await ok(nc, subjects, "platform", "list", {}) == []


@pytest.mark.rule("SM-3", "SM-12")
async def test_a_registered_platform_becomes_the_claimant_of_new_rooms(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = uid("tg:group")
    body = {"instance_id": "tg-main", "platform": "tg", "claims": ["tg:*"], "chat_scopes": {"group": True}}
    await ok(nc, subjects, "platform", "register", body)
    replies = await Collector().attach(nc, subjects.outbound("tg", sid))
    chat = {"type": "group", "target_id": "g1", "multi_party": False}
    await publish_inbound(nc, subjects, inbound(sid, "hi", platform="tg", chat=chat))
    await wait_for(lambda: replies.messages, what="the reply")
    got = await ok(nc, subjects, "session", "get", {"session_id": sid})
    # SM-12: the first claimant is recorded; SM-3: the declared chat scope wins over the message's flag.
    assert got["origin_instance"] == "tg-main"
    assert got["origin_chat"]["multi_party"] is True


@pytest.mark.rule("SM-23")
async def test_memory_clear_clears_history_and_deletes_children_by_scope(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = uid("mem")
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await publish_inbound(nc, subjects, inbound(sid, "remember this"))
    await wait_for(lambda: replies.messages, what="a reply")
    assert service.engines is not None and service.actors is not None
    await service.actors.join(timeout_s=10)
    assert await service.engines.journal.load(sid)
    kid = (await ok(nc, subjects, "session", "create_child", {"parent_id": sid}))["id"]
    other_root = uid("other")
    other_replies = await Collector().attach(nc, subjects.outbound("cli", other_root))
    await publish_inbound(nc, subjects, inbound(other_root, "mine"))
    await wait_for(lambda: other_replies.messages, what="the other root's reply")
    await service.actors.join(timeout_s=10)
    other_kid = (await ok(nc, subjects, "session", "create_child", {"parent_id": other_root}))["id"]

    # Clearing another type deletes nothing and keeps the history.
    cleared = await ok(nc, subjects, "memory", "clear", {"session_id": sid, "types": ["notes"]})
    assert cleared == {"session_id": sid, "history_cleared": False, "deleted": []}
    assert await service.engines.journal.load(sid)
    assert await refused(nc, subjects, "memory", "clear", {"session_id": sid, "scope": "tree"}) == "invalid"
    assert await refused(nc, subjects, "memory", "clear", {"session_id": uid("none")}) == "not_found"
    assert await service.engines.journal.load(sid)  # the refusals cleared nothing

    # scope session: the history is gone and this session's children are deleted, not others'.
    cleared = await ok(nc, subjects, "memory", "clear", {"session_id": sid, "types": ["context"]})
    assert cleared == {"session_id": sid, "history_cleared": True, "deleted": [kid]}
    assert await service.engines.journal.load(sid) == []
    assert await refused(nc, subjects, "session", "get", {"session_id": kid}) == "not_found"
    assert (await ok(nc, subjects, "session", "get", {"session_id": other_kid}))["parent_id"] == other_root
    assert await service.engines.journal.load(other_root)  # another session's history is not touched
    # scope all: every session's history is cleared and every child session goes.
    cleared = await ok(nc, subjects, "memory", "clear", {"session_id": sid, "scope": "all"})
    assert cleared["history_cleared"] is True and other_kid in cleared["deleted"]
    assert await refused(nc, subjects, "session", "get", {"session_id": other_kid}) == "not_found"
    assert await service.engines.journal.load(other_root) == []
    assert (await ok(nc, subjects, "session", "get", {"session_id": other_root}))["id"] == other_root
    # The session itself lives on and answers with a fresh history.
    await publish_inbound(nc, subjects, inbound(sid, "again"))
    await wait_for(lambda: len(replies.messages) >= 2, what="a reply after the clear")
    assert orjson.loads(replies.messages[-1].data)["text"] == "echo: again"


@pytest.mark.rule("SM-22")
async def test_delete_and_generation(service: TurnstileService, nc: Client, subjects: Subjects) -> None:
    root = (await ok(nc, subjects, "session", "create", {}))["id"]
    kid = (await ok(nc, subjects, "session", "create_child", {"parent_id": root}))["id"]
    assert (await ok(nc, subjects, "session", "generation", {"session_id": root}))["generation"] == 0
    deleted = await ok(nc, subjects, "session", "delete", {"session_id": root})
    assert deleted["deleted"] == [root, kid] and deleted["generation"] != 0
    kid_generation = (await ok(nc, subjects, "session", "generation", {"session_id": kid}))["generation"]
    assert kid_generation != 0
    assert await refused(nc, subjects, "session", "delete", {"session_id": root}) == "not_found"
    # SM-22: filing the id again does not change its generation.
    await ok(nc, subjects, "session", "create", {"fields": {"id": root}})
    again = await ok(nc, subjects, "session", "generation", {"session_id": root})
    assert again["generation"] == deleted["generation"]


@pytest.mark.rule("SM-2")
async def test_labels_are_rendered_in_the_service_time_zone_not_the_machines(
    settings: Settings, nc: Client, subjects: Subjects
) -> None:
    # SM-2: a default label shows its creation time in TURNSTILE_TIME_ZONE. Asia/Kolkata
    # (UTC+05:30) cannot coincide with this machine's zone by accident.
    zone = ZoneInfo("Asia/Kolkata")
    service = TurnstileService(settings.model_copy(update={"time_zone": "Asia/Kolkata"}))
    await service.start()
    try:
        sid = uid("zoned")
        created = await ok(nc, subjects, "session", "create", {"fields": {"id": sid}})
        moment = datetime.fromtimestamp(created["created_at"], zone).strftime("%Y-%m-%d %H:%M")
        assert created["label"] == {"source": f"Session {moment}", "en": f"Session {moment}", "zh": f"会话 {moment}"}
        child = await ok(nc, subjects, "session", "create", {"fields": {"parent_id": sid}})
        short = datetime.fromtimestamp(child["created_at"], zone).strftime("%H:%M")
        assert child["label"]["source"] == f"Subtask {short}"
    finally:
        await service.stop()
