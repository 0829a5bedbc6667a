"""StreamAcks without done-callbacks: each ack resolves its own future once, and futures given up on do not pile up."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from nats.aio.client import Client
from nats.js.errors import APIError

from consumers.publisher import SWEEP_MIN, StreamAcks


class FakeSub:
    _id = 1


class FakeClient:
    """A connected client that records publishes; the test answers them as the read loop would
    (``_process_msg`` with the reply subject as bytes)."""

    _status = Client.CONNECTED
    _max_payload = 1 << 20
    _flush_queue = None

    def __init__(self) -> None:
        self.sent: list[bytes] = []  # reply subjects, in publish order
        self.stats = {"in_msgs": 0, "in_bytes": 0, "out_msgs": 0, "out_bytes": 0}

    def new_inbox(self) -> str:
        return "_INBOX.test"

    async def subscribe(self, subject: str) -> FakeSub:
        return FakeSub()

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        raise AssertionError("an ack took nats-py's path")

    async def _process_headers(self, headers: bytes) -> None:
        return None

    async def _send_command(self, cmd: bytes) -> None:
        self.sent.append(cmd.split(b" ")[2])

    async def ack(self, reply: bytes, body: dict[str, Any]) -> None:
        await self._process_msg(FakeSub._id, reply, b"", orjson.dumps(body), None)


async def test_an_ack_resolves_its_publish_and_is_forgotten() -> None:
    nc = FakeClient()
    acks = StreamAcks(nc)  # type: ignore[arg-type]
    first = await acks.send("a", b"1")
    second = await acks.send("b", b"2")
    await nc.ack(nc.sent[1], {"stream": "S", "seq": 7})
    await nc.ack(nc.sent[0], {"stream": "S", "seq": 6})
    await nc.ack(nc.sent[0], {"stream": "S", "seq": 99})  # a late duplicate is ignored
    assert (first.result(), second.result()) == (6, 7)
    assert not acks._waiting


async def test_a_refused_pipelined_publish_is_logged_and_its_error_retrieved(caplog: pytest.LogCaptureFixture) -> None:
    nc = FakeClient()
    acks = StreamAcks(nc)  # type: ignore[arg-type]
    refused = await acks.send("a", b"1", log_failure=True)
    await nc.ack(nc.sent[0], {"error": {"code": 503, "err_code": 10077, "description": "no"}})
    assert isinstance(refused.exception(), APIError)
    assert "not acknowledged" in caplog.text


async def test_publishes_given_up_on_are_swept_so_the_waiting_table_stays_bounded() -> None:
    nc = FakeClient()
    acks = StreamAcks(nc)  # type: ignore[arg-type]
    for _ in range(SWEEP_MIN * 4):
        future = await acks.send("a", b"1")
        future.cancel()  # a settle that timed out: its ack never comes
    assert len(acks._waiting) <= SWEEP_MIN
    live = await acks.send("a", b"1")
    await nc.ack(nc.sent[-1], {"stream": "S", "seq": 1})
    assert live.result() == 1
    await asyncio.sleep(0)


async def test_an_unwatched_publish_makes_no_future_and_logs_a_refusal(caplog: pytest.LogCaptureFixture) -> None:
    # The write-behind session.updated events: nobody waits for their acks, a refusal is still logged.
    nc = FakeClient()
    acks = StreamAcks(nc)  # type: ignore[arg-type]
    await acks.send_unwatched("a", b"1")
    await acks.send_unwatched("b", b"2")
    assert all(entry[0] is None for entry in acks._waiting.values())
    await nc.ack(nc.sent[0], {"stream": "S", "seq": 6})
    with caplog.at_level("ERROR"):
        await nc.ack(nc.sent[1], {"error": {"code": 503, "err_code": 10077, "description": "maximum messages exceeded"}})
    assert not acks._waiting
    assert [r.levelname for r in caplog.records] == ["ERROR"] and "not acknowledged" in caplog.records[0].getMessage()
