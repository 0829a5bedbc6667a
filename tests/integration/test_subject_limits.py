"""A subject too long for the server's control line is refused by the publisher, never sent.

nats-server closes a connection whose protocol line exceeds ``max_control_line``
(4096 bytes by default); nats-py does not check it. The wire models bound session
ids (512 bytes of UTF-8), and the hot-path publisher refuses what still slips past.
"""

from __future__ import annotations

import uuid

import pytest
from nats.aio.client import Client

from consumers.publisher import StreamAcks
from core.errors import SubjectTooLong


async def test_an_over_long_subject_is_refused_and_the_connection_stays_up(nc: Client) -> None:
    name = f"LIMITS_{uuid.uuid4().hex[:6]}"
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    acks = StreamAcks(nc)
    with pytest.raises(SubjectTooLong):
        await acks.send(f"{name}." + "x" * 5000, b"lost?")
    # The connection survived: the next publish is stored and acknowledged.
    assert await (await acks.send(f"{name}.ok", b"fine")) == 1
    assert nc.is_connected
    await js.delete_stream(name)
