"""Two publishes on a turn's serial path reach the socket at once, not at the task's next wait.

nats-py writes its outgoing buffer from a flusher task: a publish waits there until the
publishing task next suspends. A turn (``consumers/turn_runner.py``) yields once after
``turn.started``, so checkpoint 1 (whose round trip checkpoint 2's fence waits for) is written
before the model-and-tools loop starts building its request; and once after its replies, so the
reply is written before turn.ended, usage and the session record's write are built (at 1 session
~0.2 ms of the reply's path, measured with ``python -m bench.timeline --marks``).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from nats.aio.client import Client

from consumers.service import TurnstileService
from consumers.turn_events import TurnEvents
from core.engine.session import Session
from schemas.subjects import Subjects
from tests.integration.harness import Collector, inbound, publish_inbound, socket_writes, wait_for


async def test_checkpoint_1_and_the_reply_are_on_the_socket_before_the_steps_after_them(
    service: TurnstileService, nc: Client, subjects: Subjects, monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = service.broker
    assert broker is not None
    sid = f"wire-{uuid.uuid4().hex[:8]}"
    replies = await Collector().attach(nc, subjects.outbound("cli", sid))
    chunks = socket_writes(broker.connection)
    wire_when: dict[str, bytes] = {}

    run_turn, ended = Session.run_pending_turn, TurnEvents.ended

    async def turn_running(self: Session, *args: Any, **kwargs: Any) -> Any:
        wire_when.setdefault("turn run", b"".join(chunks))
        return await run_turn(self, *args, **kwargs)

    async def turn_ending(self: TurnEvents, *args: Any, **kwargs: Any) -> Any:
        wire_when.setdefault("turn.ended built", b"".join(chunks))
        return await ended(self, *args, **kwargs)

    monkeypatch.setattr(Session, "run_pending_turn", turn_running)
    monkeypatch.setattr(TurnEvents, "ended", turn_ending)

    await publish_inbound(nc, subjects, inbound(sid, "hello"))
    await wait_for(lambda: replies.messages, what="the reply")

    checkpoint = b"PUB " + subjects.checkpoint(sid).encode()
    reply = b"PUB " + subjects.outbound("cli", sid).encode()
    # Checkpoint 1 (the user message staged) is on the socket when the turn starts to run.
    assert checkpoint in wire_when["turn run"].replace(b"HPUB ", b"PUB ")
    # The reply is on the socket before turn.ended (and its bookkeeping) is built.
    assert reply in wire_when["turn.ended built"].replace(b"HPUB ", b"PUB ")
