"""Time travel over the control API: the session at any journaled step, rebuilt from the SQL journal by
the service (NATS in, control API out), equals the checkpoints the stream still keeps and reaches back
past them; a deleted generation's steps are never returned."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from consumers.replay import replay
from consumers.service import TurnstileService
from consumers.settings import Settings
from core.engine.journal import EntryKind, JournalEntry
from schemas.subjects import Subjects
from tests.integration.cli_process import turnstile
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for


@pytest.fixture
async def service_on(settings: Settings, db_url: str) -> AsyncIterator[TurnstileService]:
    svc = TurnstileService(settings.model_copy(update={"database_url": db_url}))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


TOOL_TURN = '/tool knowledge_search {"query": "q"}\n/tool reply {"text": "looked it up"}\n/say one'


async def _ok(nc: Client, subjects: Subjects, verb: str, body: dict[str, Any]) -> Any:
    got = await api(nc, subjects, "session", verb, body)
    assert got["ok"], got
    return got["result"]


async def _all_versions(nc: Client, subjects: Subjects, sid: str, limit: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        body: dict[str, Any] = {"session_id": sid, "limit": limit, **({"cursor": cursor} if cursor else {})}
        got = await api(nc, subjects, "session", "state_versions", body)
        assert got["ok"], got
        assert len(got["result"]) <= limit
        items += got["result"]
        cursor = got["next_cursor"]
        if cursor is None:
            return items


async def _turns(service: TurnstileService, nc: Client, subjects: Subjects, sid: str, texts: list[str]) -> None:
    events = await Collector().attach(nc, subjects.events_of(sid))
    for text in texts:
        await publish_inbound(nc, subjects, inbound(sid, text))
    await wait_for(lambda: [e["type"] for e in events.json()].count("turn.ended") == len(texts),
                   what="every turn to end")
    assert service.actors is not None
    await service.actors.join(timeout_s=10)


@pytest.mark.timeout(60)
async def test_the_state_at_each_kept_checkpoint_is_that_checkpoint_and_older_steps_are_their_prefix(
    service_on: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    service = service_on
    sid = f"tt-{uuid.uuid4().hex[:8]}"
    await _turns(service, nc, subjects, sid, [TOOL_TURN, "two", "three"])

    kept = [c async for c in replay(nc.jetstream(), subjects, sid, "checkpoints")]
    assert len(kept) == service.settings.checkpoints_per_session == 2  # the default: only the resume point
    for checkpoint in kept:
        version = checkpoint.data["state_version"]
        got = await _ok(nc, subjects, "state_at", {"session_id": sid, "state_version": version})
        assert got["header_from"] == "checkpoint" and got["state_version"] == version
        assert got["snapshot"] == checkpoint.data["snapshot"]
        assert orjson.dumps(got["snapshot"]) == orjson.dumps(checkpoint.data["snapshot"]), "same fields, same order"

    # Every step is listed, paged, oldest first, with its kind: the tool round is there.
    latest = kept[-1].data["snapshot"]
    steps = await _all_versions(nc, subjects, sid, limit=7)
    assert [s["state_version"] for s in steps] == list(range(1, latest["state_version"] + 1))
    kinds = [s["kind"] for s in steps]
    assert {"user_message", "agent_message", "tool_call", "tool_result", "reply"} <= set(kinds)
    assert [s["type"] for s in steps if s["kind"] == "event"].count("turn_ended") == 3

    # The end of the first turn is no longer a kept checkpoint: it is rebuilt, and it is the prefix.
    first_end = next(s["state_version"] for s in steps if s["type"] == "turn_ended")
    assert first_end < min(c.data["state_version"] for c in kept)
    old = (await _ok(nc, subjects, "state_at", {"session_id": sid, "state_version": first_end}))["snapshot"]
    assert old["state_version"] == first_end and old["status"] == "idle"
    assert old["transcript"] == [item for item in latest["transcript"] if item["seq"] < first_end]
    assert old["last_turn"]["outcome"] == "replied"
    assert latest["chatend_text"].startswith(old["chatend_text"].removesuffix("\n"))
    assert "one" in old["chatend_text"] and "two" not in old["chatend_text"]
    assert old["projection"] == latest["projection"][: len(old["projection"])]
    tool_step = next(s["state_version"] for s in steps if s["kind"] == "tool_call")
    mid_tool = (await _ok(nc, subjects, "state_at", {"session_id": sid, "state_version": tool_step}))["snapshot"]
    assert mid_tool["status"] == "pending" and mid_tool["turn"]["phase"] == "tools"
    assert mid_tool["turn"]["open_calls"][0]["dispatched"] is True


@pytest.mark.rule("SM-22")
@pytest.mark.timeout(60)
async def test_after_a_deletion_only_the_new_generation_s_steps_are_returned(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"tt-del-{uuid.uuid4().hex[:8]}"
    await _turns(service, nc, subjects, sid, [TOOL_TURN, "before deletion"])
    before = await _all_versions(nc, subjects, sid, limit=100)
    old_generation = service.manager.generation_of(sid)
    await _ok(nc, subjects, "delete", {"session_id": sid})
    await wait_for(lambda: service.manager.generation_of(sid) != old_generation, what="the new generation")
    await _turns(service, nc, subjects, sid, ["after deletion"])
    assert service.engines is not None
    # A late write of the deleted generation (a turn that outlived the deletion) stays in its generation.
    late = JournalEntry(seq=0, kind=EntryKind.USER_MESSAGE, at="2026-01-01T00:00:00+00:00", payload={"text": "late"})
    await service.engines.journal.append(sid, [late], generation=old_generation)

    after = await _all_versions(nc, subjects, sid, limit=100)
    assert len(after) < len(before)
    assert [s["kind"] for s in after].count("user_message") == 1
    latest = len(after)
    got = await _ok(nc, subjects, "state_at", {"session_id": sid, "state_version": latest})
    assert got["generation"] == service.manager.generation_of(sid) != old_generation
    texts = [i["payload"].get("text") for i in got["snapshot"]["transcript"] if i["kind"] == "user_message"]
    assert texts == ["after deletion"]
    beyond = await api(nc, subjects, "session", "state_at", {"session_id": sid, "state_version": len(before)})
    assert beyond["ok"] is False and beyond["error"]["code"] == "not_found"


async def test_bad_or_out_of_range_versions_are_refused_with_a_code(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"tt-bad-{uuid.uuid4().hex[:8]}"
    await _turns(service, nc, subjects, sid, ["hello"])
    latest = len(await _all_versions(nc, subjects, sid, limit=100))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"session_id": sid, "state_version": 0}, "invalid"),
        ({"session_id": sid, "state_version": -3}, "invalid"),
        ({"session_id": sid, "state_version": "latest"}, "invalid"),
        ({"session_id": sid}, "invalid"),
        ({"session_id": sid, "state_version": 1, "at": 2}, "invalid"),
        ({"session_id": sid, "state_version": latest + 1}, "not_found"),
        ({"session_id": f"nobody-{uuid.uuid4().hex[:6]}", "state_version": 1}, "not_found"),
    ]
    for body, code in cases:
        got = await api(nc, subjects, "session", "state_at", body)
        assert got["ok"] is False and got["error"]["code"] == code, (body, got)
        assert got["error"]["message"]
    unknown = await api(nc, subjects, "session", "state_versions", {"session_id": "nobody-at-all"})
    assert unknown["error"]["code"] == "not_found"
    bad_cursor = await api(nc, subjects, "session", "state_versions", {"session_id": sid, "cursor": "zz"})
    assert bad_cursor["error"]["code"] == "invalid"


async def test_turnstile_replay_state_lists_the_steps_and_prints_the_state_at_one(
    service: TurnstileService, settings: Settings, nc: Client, subjects: Subjects
) -> None:
    sid = f"tt-cli-{uuid.uuid4().hex[:8]}"
    await _turns(service, nc, subjects, sid, [TOOL_TURN])
    listed = await turnstile("replay", "state", "-s", sid, settings=settings)
    assert listed.code == 0, listed.stderr
    steps = [orjson.loads(line) for line in listed.lines]
    assert steps == await _all_versions(nc, subjects, sid, limit=100)
    one = await turnstile("replay", "state", "-s", sid, "--at", str(len(steps)), settings=settings)
    assert one.code == 0, one.stderr
    state = orjson.loads(one.lines[0])
    assert state["state_version"] == len(steps) and state["snapshot"]["status"] == "idle"
    past = await turnstile("replay", "state", "-s", sid, "--at", str(len(steps) + 1), settings=settings)
    assert past.code != 0 and "not_found" in past.stderr and "Traceback" not in past.stderr


async def test_without_a_readable_checkpoint_the_header_comes_from_the_options_a_load_would_use(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"tt-opt-{uuid.uuid4().hex[:8]}"
    await _turns(service, nc, subjects, sid, [TOOL_TURN, "two"])
    [*_, last] = [c async for c in replay(nc.jetstream(), subjects, sid, "checkpoints")]
    version = last.data["state_version"]
    js = nc.jetstream()
    await js.purge_stream(subjects.checkpoint_stream, subject=subjects.checkpoint(sid))
    got = await _ok(nc, subjects, "state_at", {"session_id": sid, "state_version": version})
    assert got["header_from"] == "options" and got["snapshot"] == last.data["snapshot"]
    await js.publish(subjects.checkpoint(sid), b"not a checkpoint")  # unreadable: passed over, as a load does
    got = await _ok(nc, subjects, "state_at", {"session_id": sid, "state_version": version})
    assert got["header_from"] == "options" and got["snapshot"] == last.data["snapshot"]
