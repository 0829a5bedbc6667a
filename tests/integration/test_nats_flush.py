"""consumers/nats_flush.py: a flush after a subscribe means the subscription is in place.

nats-py's own ``Client.flush`` sends its PING ahead of a SUB still waiting for the flusher
task; these tests show it, and fail if our flush ever lets the PING overtake again.
"""

from __future__ import annotations

import asyncio
import uuid

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from consumers.nats_flush import flush
from consumers.nats_server import NatsServer
from tests.integration.harness import socket_writes

PING = b"PING\r\n"


def _order(chunks: list[bytes], subject: str) -> list[str]:
    wire = b"".join(chunks)
    sub, ping = wire.find(b"SUB " + subject.encode()), wire.find(PING)
    assert sub >= 0 and ping >= 0, wire
    return ["SUB", "PING"] if sub < ping else ["PING", "SUB"]


async def test_nats_py_flush_sends_its_ping_ahead_of_a_queued_sub(nc: Client) -> None:
    # Why the module exists. When nats-py fixes it, this fails: drop consumers/nats_flush.py.
    chunks = socket_writes(nc)
    await nc.subscribe("flush.nats-py")
    await nc.flush()
    assert _order(chunks, "flush.nats-py") == ["PING", "SUB"]


async def test_our_flush_sends_the_ping_behind_everything_queued(nc: Client) -> None:
    chunks = socket_writes(nc)
    await nc.subscribe("flush.ours")
    await flush(nc)
    assert _order(chunks, "flush.ours") == ["SUB", "PING"]


async def test_a_message_published_elsewhere_after_the_flush_is_never_lost(nats_server: NatsServer) -> None:
    # With nats-py's flush about 1 round in 10 loses its message here (measured on loopback).
    reader, writer = await nats.connect(nats_server.url), await nats.connect(nats_server.url)
    try:
        got: asyncio.Queue[Msg] = asyncio.Queue()
        for round_ in range(200):
            subject = f"flush.{uuid.uuid4().hex[:8]}"
            sub = await reader.subscribe(subject, cb=got.put)
            await flush(reader)
            await writer.publish(subject, b"%d" % round_)
            msg = await asyncio.wait_for(got.get(), 5)
            assert (msg.subject, msg.data) == (subject, b"%d" % round_)
            await sub.unsubscribe()
    finally:
        await reader.close()
        await writer.close()


async def test_a_closed_connection_is_refused_as_nats_py_refuses_it(nc: Client) -> None:
    await nc.close()
    with pytest.raises(nats.errors.ConnectionClosedError):
        await flush(nc)
