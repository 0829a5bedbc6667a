"""The control API's edges over a real nats-server: unknown verbs, non-object bodies, over-long session ids."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from nats.aio.client import Client

from consumers.nats_flush import flush
from consumers.service import TurnstileService
from schemas.subjects import Subjects
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for


async def request_collecting(nc: Client, subject: str, body: bytes) -> Collector:
    """Publish a request with our own reply inbox, so every answer (not only the first) is seen."""
    inbox = nc.new_inbox()
    replies = await Collector().attach(nc, inbox)
    await nc.publish(subject, body, reply=inbox)
    await flush(nc)
    return replies


async def test_an_unknown_resource_or_verb_is_answered_not_found_once(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    p = subjects.prefix
    for subject in (f"{p}.api.foo.bar", f"{p}.api.session.nope", f"{p}.api.foo", f"{p}.api.session.get.extra"):
        replies = await request_collecting(nc, subject, b"{}")
        await wait_for(lambda replies=replies: replies.messages, what=f"an answer on {subject}")
        reply = replies.json()[0]
        assert reply["ok"] is False and reply["error"]["code"] == "not_found", reply
        assert subject.removeprefix(f"{p}.api.") in reply["error"]["message"]
    # A known verb is answered by its handler only: the fallback stays silent for it.
    known = await request_collecting(nc, subjects.api("session", "generation"), orjson.dumps({"session_id": "k"}))
    await wait_for(lambda: known.messages, what="the known verb's answer")
    # The fallback handles its messages in order: once it has answered a later unknown verb,
    # it has seen the known one too, so a second answer would be here by now.
    barrier = await request_collecting(nc, f"{p}.api.foo.barrier", b"{}")
    await wait_for(lambda: barrier.messages, what="the barrier's answer")
    assert len(known.messages) == 1 and known.json()[0]["ok"] is True, known.json()


async def test_a_request_that_is_not_a_json_object_is_refused(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    for body in (b"[1, 2]", b'"a string"', b"null", b"42"):
        reply = await api(nc, subjects, "session", "get", body)
        assert reply["ok"] is False and reply["error"]["code"] == "invalid", (body, reply)
    for body in (b"{nope", b"\xff\xfe\x00binary"):
        reply = await api(nc, subjects, "session", "get", body)
        assert reply["ok"] is False and reply["error"]["code"] == "bad_json", (body, reply)


async def test_a_session_id_too_long_for_a_subject_is_refused_and_the_service_stays_connected(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    # 512 characters of 4-byte UTF-8 become a 6144-character subject token: past the server's
    # max_control_line (4096), a publish on it would make the server close the service's connection.
    long_ids = ["\U0001F600" * 512, "x" * 100_000, "é" * 300]
    requests: list[tuple[str, str, dict[str, Any]]] = []
    for sid in long_ids:
        requests += [
            ("session", "create", {"fields": {"id": sid}}),
            ("session", "ensure", {"session_id": sid}),
            ("session", "get", {"session_id": sid}),
            ("session", "create_child", {"parent_id": f"p-{uuid.uuid4().hex[:6]}", "fields": {"id": sid}}),
            ("session", "interrupt", {"session_id": sid}),
        ]
    for resource, verb, body in requests:
        reply = await api(nc, subjects, resource, verb, body)
        assert reply["ok"] is False and reply["error"]["code"] == "invalid", (resource, verb, reply)
        assert "session" in reply["error"]["message"] or "id" in reply["error"]["message"]
    # The longest id that is accepted (512 bytes) works end to end, and the service is still connected.
    sid = "é" * 256
    assert (await api(nc, subjects, "session", "create", {"fields": {"id": sid}}))["ok"]
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    await publish_inbound(nc, subjects, inbound(sid, "still connected"))
    await wait_for(lambda: replies.messages, what="a reply for the longest accepted id")
    assert service.broker is not None and service.broker.connection.is_connected
