"""consumers/buffered_publish.py against nats-py itself: the same bytes on the wire, the same refusals.

``BufferedPublish`` writes into nats-py's pending buffer through its internals; these tests fail
when a nats-py release changes what ``Client.publish`` sends or the internals it relies on.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import nats
import pytest
from nats import errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from consumers.buffered_publish import BufferedPublish, header_block, subject_bytes
from consumers.nats_flush import flush
from consumers.publisher import FENCE_HEADER

HEADERS: list[dict[str, str] | None] = [
    None,
    {"Nats-Expected-Last-Subject-Sequence": "17"},
    {"Nats-Msg-Id": "tg:group 42:turn-1:0"},
    {"Nats-Msg-Id": "  spaced\r\nid\nwith\rbreaks  ", " Trimmed-Key ": "v", "": "skipped"},
    {"Nats-Msg-Id": "ünïcode ✓", "X-Empty": ""},
]


def _capture(nc: Client) -> list[bytes]:
    """Record the commands nats-py queues (and still queue them: the connection keeps working)."""
    sent: list[bytes] = []
    send_command = nc._send_command

    async def recording(cmd: bytes, priority: bool = False) -> None:
        sent.append(cmd)
        await send_command(cmd, priority)

    nc._send_command = recording  # type: ignore[method-assign]
    return sent


@pytest.mark.parametrize("headers", HEADERS)
@pytest.mark.parametrize("reply", ["", "_INBOX.abc.17"])
async def test_the_command_is_byte_for_byte_what_nats_py_sends(nc: Client, headers: dict[str, str] | None,
                                                               reply: str) -> None:
    sent = _capture(nc)
    subject, payload = "turnstile.events.tg:group~2042.turn.started", b'{"x": "\xc3\xbc"}'
    await nc.publish(subject, payload, reply=reply, headers=headers)
    stats = dict(nc.stats)
    await BufferedPublish(nc).publish(
        subject_bytes(subject), payload, reply.encode(), header_block(headers) if headers is not None else None
    )
    assert sent[0] == sent[1]
    assert nc.stats["out_msgs"] == stats["out_msgs"] + 1
    assert nc.stats["out_bytes"] == stats["out_bytes"] + len(payload)


def test_the_fence_header_is_the_block_nats_py_would_build() -> None:
    assert header_block({"Nats-Expected-Last-Subject-Sequence": "4711"}) == FENCE_HEADER % 4711


@contextlib.asynccontextmanager
async def _reader(nc: Client, subject: str) -> AsyncIterator[asyncio.Queue[Msg]]:
    """What a second connection subscribed to ``subject`` receives."""
    got: asyncio.Queue[Msg] = asyncio.Queue()
    reader = await nats.connect(nc.connected_url.geturl() if nc.connected_url else "")
    try:
        await reader.subscribe(subject, cb=got.put)
        await flush(reader)
        yield got
    finally:
        await reader.close()


async def test_a_subscriber_sees_the_same_message_and_the_buffer_is_flushed(nc: Client) -> None:
    subject = f"bp.{uuid.uuid4().hex[:8]}"
    async with _reader(nc, subject) as got:
        wire = BufferedPublish(nc)
        await wire.publish(subject_bytes(subject), b"plain")  # no flush: the client's flusher writes it
        await wire.publish(subject_bytes(subject), b"with", b"_INBOX.r.1", header_block({"Nats-Msg-Id": "a:b:1"}))
        plain = await asyncio.wait_for(got.get(), 5)
        headed = await asyncio.wait_for(got.get(), 5)
    assert (plain.subject, plain.reply, plain.data, plain.headers) == (subject, "", b"plain", None)
    assert (headed.subject, headed.reply, headed.data, headed.headers) == (
        subject, "_INBOX.r.1", b"with", {"Nats-Msg-Id": "a:b:1"},
    )


@pytest.mark.parametrize("subject", ["", "a b", "a\r\nPUB x 1", "tab\there"])
def test_a_subject_nats_py_refuses_is_refused(subject: str) -> None:
    with pytest.raises(errors.BadSubjectError):
        subject_bytes(subject)


def test_a_header_name_nats_py_refuses_is_refused() -> None:
    with pytest.raises(errors.BadHeaderError):
        header_block({"Bad Name": "v"})


async def test_too_large_and_closed_are_refused_as_nats_py_does(nc: Client) -> None:
    wire = BufferedPublish(nc)
    with pytest.raises(errors.MaxPayloadError):
        await wire.publish(b"bp.big", b"x" * (nc.max_payload + 1))
    await nc.close()
    with pytest.raises(errors.ConnectionClosedError):
        await nc.publish("bp.closed", b"x")
    with pytest.raises(errors.ConnectionClosedError):
        await wire.publish(b"bp.closed", b"x")


def test_the_nats_py_internals_it_writes_through_are_there() -> None:
    nc = Client()
    for name in ("_status", "_max_payload", "_max_pending_size", "_pending_data_size", "_flush_queue", "stats"):
        assert hasattr(nc, name), name
    for name in ("_send_command", "_flush_pending"):
        assert asyncio.iscoroutinefunction(getattr(nc, name)), name
    assert {"out_msgs", "out_bytes"} <= set(nc.stats)


PIECES = (b'{"session_id":"s-1","at":1.5', b',"snapshot":', b'{"text": "\xc3\xbc \\" q"}' * 5_000, b"}")


@pytest.mark.parametrize("headers", HEADERS[:3])
async def test_a_payload_in_pieces_is_the_command_of_the_joined_payload(nc: Client, headers: dict[str, str] | None) -> None:
    # A checkpoint is published as its envelope's pieces around the snapshot, never joined by us.
    sent = _capture(nc)
    subject, reply = "turnstile.checkpoint.tg:group~2042", "_INBOX.abc.17"
    await nc.publish(subject, b"".join(PIECES), reply=reply, headers=headers)
    stats = dict(nc.stats)
    size_before = nc._pending_data_size
    await BufferedPublish(nc).publish(
        subject_bytes(subject), PIECES, reply.encode(), header_block(headers) if headers is not None else None
    )
    queued = nc._pending[-(len(PIECES) + 2):]
    assert b"".join(queued) == sent[0]
    assert any(piece is PIECES[2] for piece in queued), "the snapshot piece was copied"
    assert nc._pending_data_size == size_before + len(sent[0])
    assert nc.stats["out_msgs"] == stats["out_msgs"] + 1
    assert nc.stats["out_bytes"] == stats["out_bytes"] + len(b"".join(PIECES))


async def test_a_payload_in_pieces_arrives_whole_and_is_refused_over_max_payload(nc: Client) -> None:
    subject = f"bp.{uuid.uuid4().hex[:8]}"
    async with _reader(nc, subject) as got:
        wire = BufferedPublish(nc)
        await wire.publish(subject_bytes(subject), PIECES, b"_INBOX.r.2", header_block({"Nats-Msg-Id": "a:b:2"}))
        await wire.publish(subject_bytes(subject), (b"first", b"", b"-last"))
        whole = await asyncio.wait_for(got.get(), 5)
        short = await asyncio.wait_for(got.get(), 5)
        with pytest.raises(errors.MaxPayloadError):
            await wire.publish(subject_bytes(subject), (b"x" * nc.max_payload, b"y"))
    assert (whole.reply, whole.data, whole.headers) == ("_INBOX.r.2", b"".join(PIECES), {"Nats-Msg-Id": "a:b:2"})
    assert short.data == b"first-last"
