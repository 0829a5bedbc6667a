"""Helpers for integration tests: polling with a deadline, subject collectors, publishing inbound."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg

from consumers.nats_flush import flush
from consumers.service import TurnstileService
from schemas.subjects import Subjects
from tests.waiting import DEFAULT_TIMEOUT_S, wait_for  # noqa: F401 - re-exported for the integration tests


class Collector:
    """Collects every message on a subject (core NATS subscription opened before the test acts)."""

    def __init__(self) -> None:
        self.messages: list[Msg] = []

    async def attach(self, nc: Client, subject: str) -> Collector:
        async def _cb(msg: Msg) -> None:
            self.messages.append(msg)

        await nc.subscribe(subject, cb=_cb)
        await flush(nc)
        return self

    def json(self) -> list[dict[str, Any]]:
        return [orjson.loads(m.data) for m in self.messages]

    def subjects(self) -> list[str]:
        return [m.subject for m in self.messages]


def socket_writes(nc: Client) -> list[bytes]:
    """Every chunk the connection writes to its socket from now on, in order."""
    chunks: list[bytes] = []
    transport = nc._transport
    assert transport is not None
    write, writelines = transport.write, transport.writelines

    def recording_write(payload: bytes) -> None:
        chunks.append(payload)
        write(payload)

    def recording_writelines(payload: list[bytes]) -> None:
        chunks.append(b"".join(payload))
        writelines(payload)

    transport.write = recording_write  # type: ignore[method-assign]
    transport.writelines = recording_writelines  # type: ignore[method-assign]
    return chunks


def inbound(session_id: str | None, text: str, platform: str = "cli", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": uuid.uuid4().hex, "session_id": session_id, "platform": platform, "text": text}
    body.update(extra)
    return body


async def publish_inbound(nc: Client, subjects: Subjects, body: dict[str, Any], msg_id: str | None = None) -> None:
    js = nc.jetstream()
    await js.publish(
        subjects.inbound(body["platform"], body.get("session_id")),
        orjson.dumps(body),
        headers={"Nats-Msg-Id": msg_id or body["id"]},
    )


async def api(nc: Client, subjects: Subjects, resource: str, verb: str, body: dict[str, Any] | bytes) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    reply = await nc.request(subjects.api(resource, verb), raw, timeout=10)
    result: dict[str, Any] = orjson.loads(reply.data)
    return result


async def answered_then_unloaded(
    service: TurnstileService, nc: Client, subjects: Subjects, sid: str, replies: Collector
) -> None:
    """``sid`` answers one message ("first"), then a message to another session unloads it (a service
    with ``max_loaded_sessions=1``)."""
    await publish_inbound(nc, subjects, inbound(sid, "first"))
    await wait_for(lambda: len(replies.messages) == 1, what="the first reply")
    other = f"other-{uuid.uuid4().hex[:6]}"
    others = await Collector().attach(nc, subjects.outbound("cli", other))
    await publish_inbound(nc, subjects, inbound(other, "elsewhere"))
    await wait_for(lambda: others.messages, what="the other session's reply")
    actors = service.actors
    assert actors is not None
    await wait_for(lambda: actors.get(sid) is None, what="the first session to be unloaded")
