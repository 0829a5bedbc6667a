"""Session events over a real nats-server: which, on which subject, in which order; deletion racing inbound."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from consumers.service import TurnstileService
from core.sessions.incoming_message import IncomingMessage
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def ok(nc: Client, subjects: Subjects, resource: str, verb: str, body: dict[str, Any]) -> Any:
    reply = await api(nc, subjects, resource, verb, body)
    assert reply["ok"], reply
    return reply["result"]


def timeline(events: Collector) -> list[tuple[str | None, str]]:
    return [(e["session_id"], e["type"]) for e in events.json()]


@pytest.mark.rule("SM-20", "SM-32", "SM-33")
async def test_every_mutation_emits_its_event_on_the_session_subject(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = uid("ev") + ".dotted id"  # the subject carries the reversible sid token
    events = await Collector().attach(nc, subjects.events_of(sid))
    await ok(nc, subjects, "session", "create", {"fields": {"id": sid}})
    await ok(nc, subjects, "session", "update", {"session_id": sid, "changes": {"metadata": {"k": 1}}})
    await ok(nc, subjects, "session", "title", {"session_id": sid, "title": "T"})
    await ok(nc, subjects, "session", "complete", {"session_id": sid, "result": "done"})
    await ok(nc, subjects, "session", "delete", {"session_id": sid})
    await wait_for(lambda: len(events.messages) >= 5, what="five events")
    # SM-32 / SM-20 / SM-33, in the order of the mutations.
    assert [t for _, t in timeline(events)] == [
        "session.created",
        "session.updated",
        "session.updated",
        "session.completed",
        "session.deleted",
    ]
    assert events.subjects()[0] == subjects.event(sid, "session.created")
    payloads = events.json()
    assert all(p["session_id"] == sid for p in payloads)
    assert payloads[1]["data"]["session"]["metadata"] == {"k": 1}
    assert payloads[2]["data"]["session"]["title"] == "T"
    assert payloads[3]["data"]["result"] == "done" and payloads[3]["data"]["session"]["status"] == "completed"
    assert payloads[4]["data"]["generation"] != 0


@pytest.mark.rule("SM-32")
async def test_the_parent_emits_an_update_when_a_child_is_created_or_deleted(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    parent = (await ok(nc, subjects, "session", "create", {}))["id"]
    events = await Collector().attach(nc, f"{subjects.prefix}.events.>")
    child = (await ok(nc, subjects, "session", "create_child", {"parent_id": parent}))["id"]
    grandchild = (await ok(nc, subjects, "session", "create_child", {"parent_id": child}))["id"]
    await ok(nc, subjects, "session", "delete", {"session_id": child})
    await wait_for(lambda: len(events.messages) >= 7, what="seven events")
    assert timeline(events) == [
        (child, "session.created"),
        (parent, "session.updated"),
        (grandchild, "session.created"),
        (child, "session.updated"),
        # The subtree goes children first, then the parent of the deleted child is told.
        (grandchild, "session.deleted"),
        (child, "session.deleted"),
        (parent, "session.updated"),
    ]
    data = [e["data"] for e in events.json()]
    assert data[1]["change"] == "child_created" and data[1]["child_id"] == child
    assert data[1]["session"]["children"] == [child]
    assert data[6]["change"] == "child_deleted" and data[6]["child_id"] == child
    assert data[6]["session"]["children"] == []


@pytest.mark.rule("SM-21", "SM-32")
async def test_deleted_is_emitted_after_removal_and_before_the_data_clear(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = uid("order")
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await publish_inbound(nc, subjects, inbound(sid, "keep me"))
    await wait_for(lambda: replies.messages, what="a reply")
    assert service.actors is not None and service.engines is not None and service.js is not None
    await service.actors.join(timeout_s=10)
    assert await service.engines.journal.load(sid)

    seen: dict[str, Any] = {}
    original = service._clear_session_data
    js, manager = service.js, service.manager

    async def observing_clear(session_ids: Sequence[str]) -> None:
        # At the clear: the record is out of the table and session.deleted is already in the stream,
        # while the history is still there (the clear has not happened yet).
        assert list(session_ids) == [sid]
        session_id = sid
        seen["in_table"] = manager.get_session(session_id) is not None
        try:
            await js.get_last_msg(subjects.events_stream, subjects.event(session_id, "session.deleted"))
            seen["deleted_published"] = True
        except NotFoundError:
            seen["deleted_published"] = False
        seen["history_before"] = len(await service.engines.journal.load(session_id))  # type: ignore[union-attr]
        await original(session_ids)
        seen["history_after"] = len(await service.engines.journal.load(session_id))  # type: ignore[union-attr]

    manager.set_clear_session_data(observing_clear)
    await ok(nc, subjects, "session", "delete", {"session_id": sid})
    # SM-32 / SM-21: removed → session.deleted → data cleared.
    assert seen["in_table"] is False
    assert seen["deleted_published"] is True
    assert seen["history_before"] > 0 and seen["history_after"] == 0


@pytest.mark.rule("SM-17", "SM-22")
async def test_a_message_arriving_during_deletion_waits_and_is_the_new_generation(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = uid("race")
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await publish_inbound(nc, subjects, inbound(sid, "first"))
    await wait_for(lambda: replies.messages, what="the first reply")
    old_generation = (await ok(nc, subjects, "session", "generation", {"session_id": sid}))["generation"]

    manager = service.manager
    original_clear = service._clear_session_data
    clearing, release = asyncio.Event(), asyncio.Event()

    async def held_clear(session_ids: Sequence[str]) -> None:
        clearing.set()
        await release.wait()  # hold the deletion open in its data clear
        await original_clear(session_ids)

    entered: set[str] = set()
    returned: set[str] = set()
    original_record = manager.record_inbound

    async def watched_record(message: IncomingMessage) -> None:
        entered.add(message.id)
        await original_record(message)
        returned.add(message.id)

    manager.set_clear_session_data(held_clear)
    manager.record_inbound = watched_record
    deletion = asyncio.create_task(api(nc, subjects, "session", "delete", {"session_id": sid}))
    await wait_for(clearing.is_set, what="the deletion to reach its data clear")
    new_generation = manager.generation_of(sid)
    assert new_generation != old_generation  # SM-22: taken at the start of the deletion

    late = inbound(sid, "during deletion")
    await publish_inbound(nc, subjects, late)
    await wait_for(lambda: late["id"] in entered, what="the late message to reach record_inbound")
    # SM-17: it waits in record_inbound while the deletion runs.
    assert manager.is_deleting(sid) and late["id"] not in returned
    assert service.inbox is not None
    assert await service.inbox.status_of("cli", late["id"]) is None

    release.set()
    reply = await deletion
    assert reply["ok"], reply
    await wait_for(lambda: any(r["reply_to"] == late["id"] for r in replies.json()), what="the late reply")
    answer = next(r for r in replies.json() if r["reply_to"] == late["id"])
    # SM-22: it belongs to the new generation, and it refiles the session.
    assert answer["generation"] == new_generation and answer["text"] == "echo: during deletion"
    assert manager.generation_of(sid) == new_generation
    assert (await ok(nc, subjects, "session", "get", {"session_id": sid}))["id"] == sid


@pytest.mark.rule("SM-31")
async def test_removing_a_workspace_emits_an_update_per_detached_session(
    service: TurnstileService, nc: Client, subjects: Subjects, tmp_path: Any
) -> None:
    ws = (await ok(nc, subjects, "workspace", "add", {"root": str(tmp_path)}))["workspace"]
    body = {"creation": {"created_from": "cli", "workspace": ws["id"], "work": {"root": ws["root"]}}}
    root = (await ok(nc, subjects, "session", "create", body))["id"]
    events = await Collector().attach(nc, subjects.events_of(root))
    await ok(nc, subjects, "workspace", "remove", {"workspace_id": ws["id"]})
    await wait_for(lambda: events.messages, what="the root's update")
    event = events.json()[0]
    assert event["type"] == "session.updated" and event["data"]["change"] == "workspace_removed"
    assert event["data"]["session"]["workspace"] is None


@pytest.mark.rule("SM-16")
async def test_a_child_that_replies_is_completed_with_its_reply_before_its_turn_ends(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    # SM-16: the subtask is completed with the reply as its result before the round ends;
    # a root that replies is completed by the turn end only, with no result.
    parent = (await ok(nc, subjects, "session", "create", {"fields": {}}))["id"]
    child = (await ok(nc, subjects, "session", "create_child", {"parent_id": parent}))["id"]
    events = await Collector().attach(nc, subjects.events_of(child))
    parent_events = await Collector().attach(nc, subjects.events_of(parent))
    await publish_inbound(nc, subjects, inbound(child, "/tool knowledge_search {\"query\": \"q\"}\nfound it"))
    await wait_for(lambda: "turn.ended" in [e["type"] for e in events.json()], what="the child's turn end")
    types = [e["type"] for e in events.json()]
    assert types.index("session.completed") < types.index("turn.ended")
    completed = next(e for e in events.json() if e["type"] == "session.completed")
    assert completed["data"]["result"] == "echo: found it"
    got = await ok(nc, subjects, "session", "get", {"session_id": child})
    assert got["status"] == "completed" and got["result"] == "echo: found it"

    await publish_inbound(nc, subjects, inbound(parent, "hello"))
    await wait_for(lambda: "turn.ended" in [e["type"] for e in parent_events.json()], what="the parent's turn end")
    assert "session.completed" not in [e["type"] for e in parent_events.json()]
    root = await ok(nc, subjects, "session", "get", {"session_id": parent})
    assert root["status"] == "completed" and root["result"] is None
