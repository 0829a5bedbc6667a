"""Persistence across a restart, and the service on PostgreSQL: records, places, workspaces, generations."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from core.store.inbox import StagedMessage
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def ok(nc: Client, subjects: Subjects, resource: str, verb: str, body: dict[str, Any]) -> Any:
    reply = await api(nc, subjects, resource, verb, body)
    assert reply["ok"], reply
    return reply["result"]


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[TurnstileService]:
    svc = TurnstileService(settings)
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


@pytest.mark.rule("SM-7", "SM-22", "SM-28", "MQ-5")
async def test_records_places_workspaces_and_generations_survive_a_restart(
    settings: Settings, nc: Client, subjects: Subjects, db_url: str, tmp_path: Path
) -> None:
    settings = settings.model_copy(update={"database_url": db_url})
    room = uid("room")
    gone = uid("gone")
    stale = inbound(gone, "staged before the delete")
    project_dir = tmp_path / "proj"
    project_dir.mkdir()

    async with running(settings) as first:
        root = await ok(nc, subjects, "session", "create", {"fields": {"name": "R"}, "creation": {"created_from": "webui"}})
        child = await ok(nc, subjects, "session", "create_child", {"parent_id": root["id"]})
        ws = (await ok(nc, subjects, "workspace", "add", {"root": str(project_dir)}))["workspace"]
        body = {"creation": {"created_from": "cli", "workspace": ws["id"], "work": {"root": ws["root"]}}}
        project = await ok(nc, subjects, "session", "create", body)
        await ok(nc, subjects, "session", "set_current_dir", {"session_id": project["id"], "current_dir": "/p"})
        await ok(nc, subjects, "session", "add_worktree", {"session_id": project["id"], "path": "/wt"})
        await ok(nc, subjects, "place", "update", {"key": "workspace:default", "metadata": {"plugin": {"x": 1}}})
        replies = await Collector().attach(nc, subjects.outbound("im", room))
        chat = {"type": "group", "target_id": "g-" + room, "multi_party": True, "name": "Team"}
        await publish_inbound(nc, subjects, inbound(room, "hi", platform="im", chat=chat))
        await wait_for(lambda: replies.messages, what="the room's reply")

        # A message that passed record_inbound before the deletion: staged with the old generation.
        await ok(nc, subjects, "session", "ensure", {"session_id": gone})
        old_generation = first.manager.generation_of(gone)
        assert first.inbox is not None
        staged = StagedMessage("cli", stale["id"], gone, old_generation, orjson.dumps(stale))
        assert await first.inbox.stage([staged]) == [True]
        deleted = await ok(nc, subjects, "session", "delete", {"session_id": gone})
        new_generation = deleted["generation"]
        assert new_generation != old_generation
        before = {
            "sessions": await ok(nc, subjects, "session", "list", {}),
            "places": await ok(nc, subjects, "place", "list", {}),
            "workspaces": await ok(nc, subjects, "workspace", "list", {}),
        }

    events = await Collector().attach(nc, subjects.events_of(gone))
    async with running(settings) as second:
        # SM-7 / SM-28 / SM-30: everything is read back as it was.
        assert await ok(nc, subjects, "session", "list", {}) == before["sessions"]
        assert await ok(nc, subjects, "place", "list", {}) == before["places"]
        assert await ok(nc, subjects, "workspace", "list", {}) == before["workspaces"]
        got = await ok(nc, subjects, "session", "get", {"session_id": project["id"]})
        assert got["workspace"] == ws["id"] and got["work"]["worktrees"] == ["/wt"] and got["current_dir"] == "/p"
        assert (await ok(nc, subjects, "session", "get", {"session_id": root["id"]}))["children"] == [child["id"]]
        room_place = await ok(nc, subjects, "place", "of", {"session_id": room})
        assert room_place["key"] == f"im:group:g-{room}" and room_place["place"]["name"] == "Team"
        default = await ok(nc, subjects, "place", "get", {"key": "workspace:default"})
        assert default["metadata"] == {"plugin": {"x": 1}}
        # SM-22: the generation survived, so the stale message is still dropped after the restart.
        generation = await ok(nc, subjects, "session", "generation", {"session_id": gone})
        assert generation["generation"] == new_generation

        def dropped() -> list[dict[str, Any]]:
            return [e["data"] for e in events.json() if e["type"] == "message.dropped"]

        await wait_for(lambda: dropped(), what="the stale message dropped")
        assert dropped()[0]["inbound_id"] == stale["id"] and dropped()[0]["reason"] == "stale_generation"
        assert second.inbox is not None
        await wait_for(
            lambda: second.inbox.status_of("cli", stale["id"]),  # type: ignore[union-attr]
            what="the stale message marked",
        )
        assert await second.inbox.status_of("cli", stale["id"]) == "dropped"
        # A new message for the id is the new generation and is answered.
        later = await Collector().attach(nc, subjects.outbound("cli", gone))
        fresh = inbound(gone, "new life")
        await publish_inbound(nc, subjects, fresh)
        await wait_for(lambda: later.messages, what="the new generation's reply")
        answer = later.json()[0]
        assert answer["reply_to"] == fresh["id"] and answer["generation"] == new_generation
        assert [r["reply_to"] for r in later.json()] == [fresh["id"]]


@pytest.mark.postgres
@pytest.mark.rule("SM-34")
async def test_the_service_runs_on_postgresql(
    settings: Settings, nc: Client, subjects: Subjects, postgres_url: str
) -> None:
    # SM-34 / SM-21 on PostgreSQL: the same service code, another store.
    settings = settings.model_copy(update={"database_url": postgres_url})
    async with running(settings):
        created = await ok(nc, subjects, "session", "create", {"fields": {"name": "pg"}})
        sid = created["id"]
        assert (await ok(nc, subjects, "session", "get", {"session_id": sid}))["name"] == "pg"
        assert (await ok(nc, subjects, "session", "delete", {"session_id": sid}))["deleted"] == [sid]
        reply = await api(nc, subjects, "session", "get", {"session_id": sid})
        assert reply["ok"] is False and reply["error"]["code"] == "not_found"

        room = uid("pg-room")
        replies = await Collector().attach(nc, subjects.outbound("cli", room))
        await publish_inbound(nc, subjects, inbound(room, "hello pg"))
        await wait_for(lambda: replies.messages, what="the reply")
        assert replies.json()[0]["text"] == "echo: hello pg"

        async def last_outcome() -> str | None:
            turn = (await ok(nc, subjects, "session", "get", {"session_id": room}))["last_turn"]
            return None if turn is None else str(turn["outcome"])

        assert await wait_for(last_outcome, what="the turn's bookkeeping") == "replied"
