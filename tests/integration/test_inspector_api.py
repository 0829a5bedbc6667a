"""The session inspector's read-only JSON endpoints and live events, against a running service."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import orjson
import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound
from tests.waiting import wait_for

TOOL_TURN = '/tool knowledge_search {"query": "q"}\nhello <img src=x onerror=alert(1)>'


async def _tool_turn(service: TurnstileService, nc: Client, subjects: Subjects, sid: str) -> None:
    replies = await Collector().attach(nc, f"{subjects.prefix}.outbound.cli.>")
    await publish_inbound(nc, subjects, inbound(sid, TOOL_TURN))
    await wait_for(lambda: len(replies.messages) >= 1, what="the reply")
    assert service.actors is not None
    await service.actors.join(timeout_s=10)


async def _get(url: str, **params: Any) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.get(url, params=params)


async def test_the_page_and_its_assets_are_served_from_the_package(service: TurnstileService) -> None:
    page = await _get(f"{service.http.url}/inspector/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "app.js" in page.text and "style.css" in page.text
    for asset, kind in (("app.js", "javascript"), ("style.css", "text/css")):
        got = await _get(f"{service.http.url}/inspector/static/{asset}")
        assert got.status_code == 200 and kind in got.headers["content-type"]
    assert (await _get(f"{service.http.url}/inspector/static/..%2Finspector.py")).status_code == 404


async def test_sessions_are_listed_with_label_kind_and_status_and_searched_by_id(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"insp-{uuid.uuid4().hex[:6]}"
    await _tool_turn(service, nc, subjects, sid)
    child = await api(nc, subjects, "session", "create_child", {"parent_id": sid, "fields": {"name": "sub task"}})
    assert child["ok"], child
    child_id = child["result"]["id"]

    listed = (await _get(f"{service.http.url}/inspector/api/sessions")).json()
    by_id = {s["id"]: s for s in listed["sessions"]}
    assert by_id[sid]["kind"] and by_id[sid]["status"] and by_id[sid]["label"]["en"]
    assert by_id[child_id]["parent_id"] == sid and by_id[sid]["children"] == [child_id]
    assert listed["truncated"] is False

    found = (await _get(f"{service.http.url}/inspector/api/sessions", q=sid[-6:].upper())).json()
    # The match and its ancestors (so the tree can show where it is), nothing else.
    assert {s["id"] for s in found["sessions"]} == {sid}
    found_child = (await _get(f"{service.http.url}/inspector/api/sessions", q=child_id)).json()
    assert [s["id"] for s in found_child["sessions"]] == [sid, child_id]


async def test_a_session_shows_its_transcript_and_checkpoint_timeline(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"insp/{uuid.uuid4().hex[:6]} x"  # ids with '/' and spaces travel as a query parameter
    await _tool_turn(service, nc, subjects, sid)
    base = f"{service.http.url}/inspector/api"

    session = (await _get(f"{base}/session", id=sid)).json()
    assert session["session"]["id"] == sid
    kinds = [item["kind"] for item in session["transcript"]]
    assert kinds[0] == "user_message" and "tool_result" in kinds and kinds[-1] == "agent_message"
    call = next(i for i in session["transcript"] if i["kind"] == "agent_message" and i["payload"]["tool_calls"])
    assert call["payload"]["tool_calls"][0]["name"] == "knowledge_search"
    assert call["payload"]["tool_calls"][0]["arguments"] == {"query": "q"}
    assert session["checkpoint"]["transition"] == "turn_ended"

    timeline = (await _get(f"{base}/checkpoints", id=sid)).json()["checkpoints"]
    assert timeline, "the retained checkpoints"
    assert timeline[-1]["transition"] == "turn_ended"
    for entry in timeline:
        assert set(entry) == {"seq", "transition", "state_version", "size_bytes", "at", "generation"}
        assert entry["size_bytes"] > 0
    viewed = (await _get(f"{base}/checkpoint", id=sid, seq=str(timeline[0]["seq"]))).json()
    assert viewed["session_id"] == sid and viewed["state_version"] == timeline[0]["state_version"]
    assert "snapshot" in viewed


async def test_bad_requests_get_a_code_and_a_message(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"insp-{uuid.uuid4().hex[:6]}"
    other = f"insp-{uuid.uuid4().hex[:6]}"
    await _tool_turn(service, nc, subjects, sid)
    await _tool_turn(service, nc, subjects, other)
    base = f"{service.http.url}/inspector/api"
    timeline = (await _get(f"{base}/checkpoints", id=other)).json()["checkpoints"]

    cases: list[tuple[str, dict[str, str], int, str]] = [
        ("session", {}, 400, "invalid"),
        ("session", {"id": "no-such-session"}, 404, "not_found"),
        ("checkpoint", {"id": sid, "seq": "abc"}, 400, "invalid"),
        ("checkpoint", {"id": sid, "seq": "999999"}, 404, "not_found"),
        # Another session's checkpoint is not shown under this session's id.
        ("checkpoint", {"id": sid, "seq": str(timeline[-1]["seq"])}, 404, "not_found"),
        ("checkpoints", {"id": "x" * 5000}, 400, "invalid"),
    ]
    for path, params, status, code in cases:
        got = await _get(f"{base}/{path}", **params)
        body = got.json()
        assert (got.status_code, body["code"]) == (status, code), (path, params, body)
        assert body["message"]


async def test_the_endpoints_are_read_only(service: TurnstileService) -> None:
    async with httpx.AsyncClient() as client:
        for path in ("/inspector/api/sessions", "/inspector/api/session", "/inspector/api/checkpoints"):
            got = await client.post(f"{service.http.url}{path}", content=b"{}")
            assert got.status_code == 405


async def test_live_events_arrive_as_server_sent_events(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    sid = f"insp-{uuid.uuid4().hex[:6]}"
    other = f"insp-{uuid.uuid4().hex[:6]}"
    received: list[dict[str, Any]] = []
    connected = asyncio.Event()

    async def listen() -> None:
        async with (
            httpx.AsyncClient(timeout=None) as client,
            client.stream("GET", f"{service.http.url}/inspector/api/live", params={"id": sid}) as resp,
        ):
            assert resp.headers["content-type"].startswith("text/event-stream")
            async for line in resp.aiter_lines():
                if line.startswith(": connected"):
                    connected.set()
                if line.startswith("data: "):
                    received.append(orjson.loads(line[len("data: "):]))

    listener = asyncio.create_task(listen())
    try:
        await wait_for(connected.is_set, what="the live stream to open")
        await publish_inbound(nc, subjects, inbound(other, "not for this page"))
        await publish_inbound(nc, subjects, inbound(sid, "live one"))
        await wait_for(
            lambda: any(e.get("type") == "turn.ended" for e in received), what="turn.ended on the live stream"
        )
        await wait_for(lambda: any(e.get("kind") == "checkpoint" for e in received), what="a live checkpoint")
    finally:
        listener.cancel()
        with pytest.raises(asyncio.CancelledError):
            await listener
    events = [e for e in received if e.get("kind") == "event"]
    assert events and all(e["session_id"] == sid for e in events)
    assert {e["type"] for e in events} >= {"turn.started", "turn.ended"}
    cp = next(e for e in received if e.get("kind") == "checkpoint")
    assert cp["session_id"] == sid and cp["transition"] and cp["size_bytes"] > 0
    assert cp["checkpoint"]["session_id"] == sid and cp["checkpoint"]["state_version"] == cp["state_version"]
    assert "snapshot" in cp["checkpoint"]


async def test_an_open_live_stream_does_not_hold_up_the_service_stop(settings: Settings) -> None:
    service = TurnstileService(settings)
    await service.start()
    stopped = False
    connected = asyncio.Event()

    async def listen() -> None:
        async with (
            httpx.AsyncClient(timeout=None) as client,
            client.stream("GET", f"{service.http.url}/inspector/api/live") as resp,
        ):
            async for line in resp.aiter_lines():
                if line.startswith(": connected"):
                    connected.set()

    listener = asyncio.create_task(listen())
    try:
        await wait_for(connected.is_set, what="the live stream to open")
        # aiohttp waits up to 60 s (the test's timeout) for open responses unless the stream ends itself.
        await service.stop()
        stopped = True
        await wait_for(listener.done, what="the live stream to end with the service")
        assert listener.exception() is None
    finally:
        listener.cancel()
        if not stopped:
            await service.stop()


async def test_a_standby_serves_the_page_and_answers_its_endpoints_with_unavailable(settings: Settings) -> None:
    standby = TurnstileService(settings)  # the endpoint listens before the lease is ours
    await standby.http.start()
    try:
        assert (await _get(f"{standby.http.url}/inspector/")).status_code == 200
        for path, params in (("sessions", {}), ("live", {}), ("checkpoints", {"id": "s1"})):
            got = await _get(f"{standby.http.url}/inspector/api/{path}", **params)
            assert (got.status_code, got.json()["code"]) == (503, "unavailable"), path
    finally:
        await standby.http.stop()


async def test_a_failing_read_answers_internal_with_a_message(
    service: TurnstileService, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("the table is gone")

    monkeypatch.setattr(service.manager, "list_sessions", broken)
    got = await _get(f"{service.http.url}/inspector/api/sessions")
    assert got.status_code == 500
    assert got.json()["code"] == "internal" and "the table is gone" in got.json()["message"]
