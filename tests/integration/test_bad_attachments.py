"""Bad attachments are dead-lettered whole while decoding, before any session is filed."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from consumers.nats_server import NatsServer
from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.inbox_rows import inbox_row_count
from tests.integration.harness import Collector, api, inbound, publish_inbound, wait_for

MAX_ATTACHMENT_BYTES = 1000


@pytest.fixture
def settings(nats_server: NatsServer, tmp_path: Path) -> Settings:
    return Settings(
        nats_url=nats_server.url,
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'turnstile.db'}",
        prefix="t" + uuid.uuid4().hex[:8],
        fetch_timeout_s=0.2,
        ack_wait_s=5.0,
        max_attachment_bytes=MAX_ATTACHMENT_BYTES,
    )


def att(file_name: str = "notes.txt", data: bytes | None = b"hi", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"file_name": file_name, "media_type": "text/plain", **extra}
    if data is not None:
        body["data_base64"] = base64.b64encode(data).decode()
    return body


BAD_ATTACHMENTS: list[tuple[str, list[dict[str, Any]]]] = [
    ("bad base64", [att(data=None, data_base64="@@not base64@@")]),
    ("path traversal", [att("../../etc/passwd")]),
    ("a directory part", [att("dir/notes.txt")]),
    ("a backslash", [att("dir\\notes.txt")]),
    ("dot-dot", [att("..")]),
    ("a NUL", [att("notes\x00.txt")]),
    ("a control char", [att("notes\n.txt")]),
    ("a name too long", [att("é" * 200)]),
    ("an empty name", [att("")]),
    ("inline bytes over the limit", [att(data=b"x" * (MAX_ATTACHMENT_BYTES + 1))]),
    ("too many", [att(f"f{i}.txt") for i in range(33)]),
    ("a bad one after a good one", [att("ok.txt"), att("../x")]),
]


@pytest.mark.rule("MQ-9")
async def test_bad_attachments_are_dead_lettered_before_any_session_is_filed(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    dead = await Collector().attach(nc, subjects.dlq_inbound)
    events = await Collector().attach(nc, f"{subjects.prefix}.events.>")
    sids = []
    for what, attachments in BAD_ATTACHMENTS:
        sid = f"att-{uuid.uuid4().hex[:6]}"
        sids.append(sid)
        await publish_inbound(nc, subjects, inbound(sid, what, attachments=attachments))
    # A good message after them is answered: the bad ones did not block the stream.
    good_sid = f"att-ok-{uuid.uuid4().hex[:6]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", good_sid))
    edge = [att(data=b"y" * MAX_ATTACHMENT_BYTES), *[att(f"f{i}.txt") for i in range(31)]]
    await publish_inbound(nc, subjects, inbound(good_sid, "fine", attachments=edge))
    await wait_for(lambda: replies.messages, what="the good message's reply")
    await wait_for(lambda: len(dead.messages) >= len(BAD_ATTACHMENTS), what="a dead letter per bad message")

    letters = dead.json()
    assert len(letters) == len(BAD_ATTACHMENTS)
    for letter, (what, _) in zip(letters, BAD_ATTACHMENTS, strict=True):
        assert letter["error"]["code"] == "invalid_attachment", (what, letter["error"])
        assert "attachment" in letter["error"]["message"], (what, letter["error"])
        assert orjson.loads(letter["raw"])["text"] == what
    # Nothing was filed for them: no session, no event of theirs.
    for sid in sids:
        assert (await api(nc, subjects, "session", "get", {"session_id": sid}))["error"]["code"] == "not_found"
    assert not [e for e in events.json() if e["session_id"] in sids]
    assert service.inbox is not None
    assert [await inbox_row_count(service.db, sid) for sid in sids] == [0] * len(sids)
