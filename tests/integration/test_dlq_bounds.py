"""Payloads just under and over every size limit: each is answered or dead-lettered, none lost.

The server runs with a small ``max_payload`` so its limit is reached cheaply; a dead
letter must fit under it even when the raw payload is binary (JSON escaping turns a
NUL byte into six characters, a stray high byte into a three-byte U+FFFD).
"""

from __future__ import annotations

import hashlib
import uuid

import orjson
import pytest
from nats.aio.client import Client
from nats.errors import MaxPayloadError

from consumers.service import TurnstileService
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, wait_for

SERVER_MAX_PAYLOAD = 65_536
MAX_INBOUND_BYTES = 16_384


@pytest.fixture
def nats_config() -> str:
    return f"max_payload: {SERVER_MAX_PAYLOAD}\n"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"max_inbound_bytes": MAX_INBOUND_BYTES})


def valid_json_of_size(sid: str, size: int) -> bytes:
    body = inbound(sid, "")
    padding = size - len(orjson.dumps(body))
    body["text"] = "p" * padding
    raw = orjson.dumps(body)
    assert len(raw) == size
    return raw


def binary_of_size(size: int) -> bytes:
    """Not UTF-8 and as expensive to escape as it gets."""
    return (b"\x00\xff\x01\xfe" * (size // 4 + 1))[:size]


@pytest.mark.rule("MQ-9")
async def test_payloads_around_every_limit_are_answered_or_dead_lettered(
    service: TurnstileService, nc: Client, subjects: Subjects
) -> None:
    assert nc.max_payload == SERVER_MAX_PAYLOAD
    sid = f"lim-{uuid.uuid4().hex[:6]}"
    subject = subjects.inbound("cli", sid)
    near_server_limit = SERVER_MAX_PAYLOAD - 1024  # room for the subject and headers
    cases: list[tuple[bytes, str | None]] = [
        (valid_json_of_size(sid, MAX_INBOUND_BYTES), None),
        (valid_json_of_size(sid, MAX_INBOUND_BYTES + 1), "too_large"),
        (binary_of_size(MAX_INBOUND_BYTES), "bad_json"),
        (binary_of_size(MAX_INBOUND_BYTES + 1), "too_large"),
        (binary_of_size(near_server_limit), "too_large"),
        (b"x" * near_server_limit, "too_large"),
        ("é".encode() * (near_server_limit // 2), "too_large"),
    ]
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    dead = await Collector().attach(nc, subjects.dlq_inbound)
    js = nc.jetstream()
    expected: dict[int, tuple[bytes, str | None]] = {}
    for raw, code in cases:
        ack = await js.publish(subject, raw, headers={"Nats-Msg-Id": uuid.uuid4().hex})
        expected[ack.seq] = (raw, code)
    # Over the server's limit the publish itself is refused: the publisher knows, nothing is accepted.
    with pytest.raises(MaxPayloadError):
        await js.publish(subject, binary_of_size(SERVER_MAX_PAYLOAD + 1))

    n_dead = sum(1 for _, code in cases if code)
    await wait_for(lambda: len(dead.messages) >= n_dead, what=f"{n_dead} dead letters")
    await wait_for(lambda: replies.messages, what="the answer to the largest accepted message")
    for msg in dead.messages:
        assert len(msg.data) <= SERVER_MAX_PAYLOAD
        letter = orjson.loads(msg.data)
        raw, code = expected.pop(letter["stream_seq"])
        assert letter["error"]["code"] == code and msg.headers and msg.headers["Turnstile-Error-Code"] == code
        assert letter["raw_size_bytes"] == len(raw)
        assert letter["raw_sha256"] == hashlib.sha256(raw).hexdigest()
        if code == "too_large":
            assert letter["raw_truncated"] is True
        if not letter["raw_truncated"]:
            assert letter["raw"] == raw.decode("utf-8", errors="replace")
        assert raw.decode("utf-8", errors="replace").startswith(letter["raw"].rstrip("\ufffd"))
        # An operator fetches the original from the inbound stream by its sequence and checks the hash.
        original = await js.get_msg(subjects.inbound_stream, letter["stream_seq"])
        assert hashlib.sha256(original.data or b"").hexdigest() == letter["raw_sha256"]
    assert [code for _, code in expected.values()] == [None]
    assert replies.json()[0]["reply_to"] == orjson.loads(cases[0][0])["id"]
    # Nothing left pending or unacknowledged on the inbound consumer.
    info = await js.consumer_info(subjects.inbound_stream, service.settings.consumer_name)
    assert info.num_pending == 0 and info.num_ack_pending == 0
