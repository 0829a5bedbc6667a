"""Free time, wakeup and history ingress driven through the control API over a real nats-server."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for
from tests.integration.ks_helpers import events_of, last_snapshot, transitions


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _write(node_id: str, parent_id: str, content: str, plus: bool = False) -> str:
    args = orjson.dumps({"node_id": node_id, "parent_id": parent_id, "content": content}).decode()
    return f"/tool{'+' if plus else ''} knowledge_write {args}"


async def _ok(nc: Client, subjects: Subjects, resource: str, verb: str, body: dict[str, Any]) -> Any:
    got = await api(nc, subjects, resource, verb, body)
    assert got["ok"], got
    return got["result"]


@pytest.mark.rule("KS-3", "KS-7", "KS-17", "KS-18")
async def test_a_free_time_slice_commits_its_knowledge_writes_atomically_at_the_end(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid, root = _id("ft"), _id("kroot")
    n1, n2 = _id("n1"), _id("n2")
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    events = await Collector().attach(nc, subjects.events_of(sid))
    instructions = "\n".join([_write(n1, root, "first fact"), _write(n2, n1, "second fact", plus=True),
                              "/stall 2", "/say slice done"])
    started = await _ok(nc, subjects, "turn", "free_time",
                        {"session_id": sid, "roots": [root], "free_time": {"budget": "short"},
                         "instructions": instructions})
    assert started["mode"] == "free_time" and started["status"] == "pending"
    # Both writes are staged (journaled with their tool results) but nothing is visible yet.
    await wait_for(lambda: transitions(checkpoints).count("tool_result") == 2, what="both tool results")
    for node in (n1, n2):
        before = await api(nc, subjects, "knowledge", "get", {"node_id": node})
        assert before["error"]["code"] == "not_found"
    assert len(last_snapshot(checkpoints)["knowledge_plan"]["ops"]) == 2
    # KS-18: the commit makes both visible at once and completes the session.
    await wait_for(lambda: "committed" in transitions(checkpoints), what="the commit")
    assert (await _ok(nc, subjects, "knowledge", "get", {"node_id": n1}))["content"] == "first fact"
    second = await _ok(nc, subjects, "knowledge", "get", {"node_id": n2})
    assert (second["content"], second["parent_id"], second["version"]) == ("second fact", n1, 1)
    listed = await _ok(nc, subjects, "knowledge", "list", {"parent_id": n1})
    assert [n["id"] for n in listed["nodes"]] == [n2]
    found = await _ok(nc, subjects, "knowledge", "list", {"query": "FACT", "roots": [root]})
    assert sorted(n["id"] for n in found["nodes"]) == sorted([n1, n2])
    snap = last_snapshot(checkpoints)
    assert snap["completed"] and snap["status"] == "completed"
    assert snap["commit"]["op_count"] == 2 and snap["free_time_result"]["reason"] == "tool"
    assert transitions(checkpoints)[0] == "message_staged"
    assert transitions(checkpoints)[-2:] == ["finalized", "committed"]
    await wait_for(lambda: events_of(events, "turn.ended"), what="turn.ended")
    assert events_of(events, "turn.ended")[0]["data"]["mode"] == "free_time"
    # A second free-time request on the same id is refused: the opening happens once.
    again = await api(nc, subjects, "turn", "free_time", {"session_id": sid, "roots": [root]})
    assert again["error"]["code"] == "conflict"


@pytest.mark.rule("KS-17", "KS-18")
async def test_a_free_time_deadline_finalizes_the_slice_and_commits_what_was_staged(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid, root, node = _id("ftd"), _id("kroot"), _id("n")
    result = await _ok(nc, subjects, "turn", "free_time", {
        "session_id": sid, "roots": [root], "deadline_s": 0.5, "wait": True,
        "instructions": _write(node, root, "before the deadline") + "\n/stall 30",
    })
    assert result["outcome"] == "aborted" and result["completed"] is True
    assert result["free_time_result"]["reason"] == "deadline"
    assert result["committed"]["op_count"] == 1
    assert (await _ok(nc, subjects, "knowledge", "get", {"node_id": node}))["content"] == "before the deadline"


@pytest.mark.rule("KS-7", "KS-3")
async def test_a_wakeup_needs_an_rfc3339_marker_runs_once_and_delivers_its_replies(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = _id("wake")
    bad = await api(nc, subjects, "turn", "wakeup", {"session_id": sid, "wakeup_marker": "tomorrow at 9"})
    assert bad["error"]["code"] == "invalid" and "RFC 3339" in bad["error"]["message"]
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    checkpoints = await Collector().attach(nc, subjects.checkpoint(sid))
    result = await _ok(nc, subjects, "turn", "wakeup", {
        "session_id": sid, "wakeup_marker": "2025-01-02T03:04:05+01:00", "wait": True, "platform": "cli",
        "instructions": "/say good morning",
    })
    assert (result["outcome"], result["completed"], result["delivered"]) == ("replied", True, 1)
    await wait_for(lambda: replies.messages, what="the wakeup reply")
    assert replies.json()[0]["text"] == "good morning"
    opening = next(i for i in last_snapshot(checkpoints)["transcript"] if i["kind"] == "user_message")
    assert "wakeup_marker: 2025-01-02T03:04:05+01:00" in opening["payload"]["text"]
    again = await api(nc, subjects, "turn", "wakeup", {"session_id": sid, "wakeup_marker": "2025-01-03T00:00:00Z"})
    assert again["error"]["code"] == "conflict"


@pytest.mark.rule("KS-16", "KS-5", "KS-18")
async def test_history_ingress_of_a_terminated_conversation_writes_knowledge_and_commits(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid, root, node = _id("conv"), _id("kroot"), _id("digest")
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await publish_inbound(nc, subjects, inbound(sid, "the launch is on friday"))
    await wait_for(lambda: replies.messages, what="the conversation's answer")
    # KS-16: a conversation whose source has not terminated needs no ingress.
    early = await api(nc, subjects, "turn", "ingress", {"session_id": sid})
    assert early["error"]["code"] == "conflict"
    ingress_sid = f"{sid}:ingress"
    checkpoints = await Collector().attach(nc, subjects.checkpoint(ingress_sid))
    result = await _ok(nc, subjects, "turn", "ingress", {
        "session_id": sid, "final_text": "bye for now", "roots": [root], "wait": True,
        "instructions": _write(node, root, "launch: friday"),
    })
    assert result["source_session_id"] == sid and result["session_id"] == ingress_sid
    assert (result["mode"], result["completed"]) == ("ingress", True)
    assert result["committed"]["op_count"] == 1
    assert (await _ok(nc, subjects, "knowledge", "get", {"node_id": node}))["content"] == "launch: friday"
    # The ingress opening quotes the source transcript, including the final message.
    opening = next(i for i in last_snapshot(checkpoints)["transcript"] if i["kind"] == "user_message")
    text = opening["payload"]["text"]
    assert f"[history ingress of {sid}]" in text and "the launch is on friday" in text and "bye for now" in text
    assert last_snapshot(checkpoints)["mode"] == {"kind": "ingress", "record_id": sid}
    twice = await api(nc, subjects, "turn", "ingress", {"session_id": sid})
    assert twice["error"]["code"] == "conflict"


async def test_knowledge_ops_refuse_clearly(service: TurnstileService, nc: Client, subjects: Subjects) -> None:
    missing = await api(nc, subjects, "knowledge", "get", {"node_id": _id("none")})
    assert missing["error"]["code"] == "not_found"
    unscoped = await api(nc, subjects, "knowledge", "list", {"query": "x"})
    assert unscoped["error"]["code"] == "invalid"
    ingress_of_nothing = await api(nc, subjects, "turn", "ingress", {"session_id": _id("ghost"), "final_text": "x"})
    assert ingress_of_nothing["error"]["code"] == "not_found"


@pytest.mark.rule("SM-15", "SM-16")
async def test_a_mode_turn_files_its_session_so_it_is_kept_listed_and_deletable(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    # A free-time slice on a new id files the session by id (kind owner): its usage, status and
    # last turn are kept like a conversation's, it is listed, and session.delete removes it.
    sid, root = _id("ftfiled"), _id("kroot")
    events = await Collector().attach(nc, subjects.events_of(sid))
    result = await _ok(nc, subjects, "turn", "free_time", {
        "session_id": sid, "roots": [root], "wait": True, "instructions": "/usage 7 3\n/say resting"})
    assert result["completed"] is True
    await wait_for(lambda: events_of(events, "turn.ended"), what="turn.ended")

    async def recorded() -> dict[str, Any] | None:
        got = await _ok(nc, subjects, "session", "get", {"session_id": sid})
        return got if got["last_turn"] is not None and got["tokens"] is not None else None

    got = await wait_for(recorded, what="the turn's bookkeeping")
    assert got["kind"] == "owner" and got["origin_platform"] is None
    assert got["status"] == "completed" and got["tokens"] == {"input": 7, "output": 3}
    assert got["last_turn"]["outcome"] in {"replied", "silent"}
    listed = await _ok(nc, subjects, "session", "list", {})
    assert sid in [s["id"] for s in listed]
    deleted = await _ok(nc, subjects, "session", "delete", {"session_id": sid})
    assert sid in deleted["deleted"]
    assert (await api(nc, subjects, "session", "get", {"session_id": sid}))["error"]["code"] == "not_found"
