"""Deleting a subtree larger than one deletion chunk: every session's event, history and checkpoints go (SM-21, SM-32)."""

from __future__ import annotations

import uuid

import pytest
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from consumers.service import TurnstileService
from core.sessions.manager import DELETION_CHUNK
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for


async def _ok(nc: Client, subjects: Subjects, verb: str, body: dict[str, object]) -> object:
    reply = await api(nc, subjects, "session", verb, body)
    assert reply["ok"], reply
    return reply["result"]


async def _has_checkpoint(service: TurnstileService, subjects: Subjects, sid: str) -> bool:
    assert service.js is not None
    try:
        await service.js.get_last_msg(subjects.checkpoint_stream, subjects.checkpoint(sid))
    except NotFoundError:
        return False
    return True


@pytest.mark.rule("SM-21", "SM-32")
async def test_a_subtree_of_more_than_one_chunk_is_deleted_whole_children_first(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    run = uuid.uuid4().hex[:8]
    root = f"tree-{run}"
    children = [f"tree-{run}-c{i}" for i in range(DELETION_CHUNK + 6)]  # two chunks
    await _ok(nc, subjects, "create", {"fields": {"id": root}})
    for child in children:
        await _ok(nc, subjects, "create", {"fields": {"id": child, "parent_id": root}})
    talked = [children[0], children[-1], root]  # in the first chunk, the last, and the root itself
    replies = {sid: await Collector().attach(nc, subjects.outbound("cli", sid)) for sid in talked}
    for sid in talked:
        await publish_inbound(nc, subjects, inbound(sid, f"hello {sid}"))
    await wait_for(lambda: all(r.messages for r in replies.values()), what="a reply in each talked-to session")
    assert service.actors is not None and service.engines is not None
    await service.actors.join(timeout_s=10)
    for sid in talked:
        assert await service.engines.journal.load(sid, generation=service.manager.generation_of(sid))
        assert await _has_checkpoint(service, subjects, sid)
    events = await Collector().attach(nc, f"{subjects.prefix}.events.*.session.deleted")
    old = {sid: service.manager.generation_of(sid) for sid in [root, *children]}

    deleted = await _ok(nc, subjects, "delete", {"session_id": root})
    assert isinstance(deleted, dict) and deleted["deleted"] == [root, *children]

    # SM-32: one session.deleted per session, children before their parent; SM-21: all of it cleared.
    await wait_for(lambda: len(events.messages) >= len(children) + 1, what="every session.deleted")
    order = [e["session_id"] for e in events.json()]
    assert sorted(order) == sorted([root, *children]) and order[-1] == root
    for sid in talked:
        assert await service.engines.journal.load(sid, generation=old[sid]) == []
        assert not await _has_checkpoint(service, subjects, sid)
    assert all(service.manager.get_session(sid) is None for sid in [root, *children])
