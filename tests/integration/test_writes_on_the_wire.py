"""A turn's reply reaches the socket before turn.ended's bookkeeping, not at the task's next yield.

nats-py writes its outgoing buffer from a flusher task: a publish waits there until the
publishing task next suspends. After a turn's last reply (``consumers/turn_runner.py``) the turn
yields once, so the reply is written before turn.ended, usage and the session record's write are
built (at 1 session ~0.2 ms of the reply's path, measured with ``python -m bench.timeline --marks``).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.turn_events import TurnEvents
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, socket_writes, wait_for


async def test_the_reply_is_on_the_socket_before_turn_ended_is_built(
    service: TurnstileService, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = service.broker
    assert broker is not None
    sid = f"wire-{uuid.uuid4().hex[:8]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    chunks = socket_writes(broker.connection)
    wire_when: dict[str, bytes] = {}

    ended = TurnEvents.ended

    async def turn_ending(self: TurnEvents, *args: Any, **kwargs: Any) -> Any:
        wire_when.setdefault("turn.ended built", b"".join(chunks))
        return await ended(self, *args, **kwargs)

    monkeypatch.setattr(TurnEvents, "ended", turn_ending)

    await publish_inbound(nc, subjects, inbound(sid, "hello"))
    await wait_for(lambda: replies.messages, what="the reply")

    reply = b"PUB " + subjects.outbound("cli", sid).encode()
    # The reply is on the socket before turn.ended (and its bookkeeping) is built.
    assert reply in wire_when["turn.ended built"].replace(b"HPUB ", b"PUB ")
