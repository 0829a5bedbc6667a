"""A subscription whose messages are handled inside nats-py's read loop, without a Msg, a queue or a task.

nats-py hands every message of a subscription with a callback to that subscription's
task: the read loop builds a ``Msg`` (subject and reply decoded, headers parsed), puts it
on the subscription's ``asyncio.Queue``, wakes the task, and the task awaits the
callback. For the publisher's JetStream acks (about eight per inbound message, each a
tiny JSON body that only resolves a future) that is a queue put/get, a task wake-up and
a coroutine per ack. ``subscribe_inline`` registers an ordinary nats-py subscription (so
it is re-subscribed after a reconnect and removed on close) without a callback, and
routes the messages of its sid, as the read loop parses them, to a plain function:
``handle(subject, data, headers)`` with the subject as bytes and the headers as nats-py
parses them (``None`` without headers). Every other sid takes nats-py's own path.

This leans on nats-py internals (``Client._process_msg`` called by the protocol parser
with the sid, subject, reply, payload and raw headers; ``Client._process_headers``;
``Subscription._id``): tests/integration/test_inline_delivery.py fails if they change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.subscription import Subscription

__all__ = ["InlineHandler", "subscribe_inline"]

log = logging.getLogger(__name__)

InlineHandler = Callable[[bytes, bytes, dict[str, str] | None], None]


async def subscribe_inline(nc: Client, wildcard: str, handle: InlineHandler) -> Subscription:
    """Subscribe to ``wildcard``; its messages go to ``handle`` in the read loop (it must not block or await)."""
    sub = await nc.subscribe(wildcard)
    inline_sid = sub._id
    process_msg = nc._process_msg
    process_headers = nc._process_headers
    stats = nc.stats

    async def _process_msg(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        if sid != inline_sid:
            await process_msg(sid, subject, reply, data, headers)
            return
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        try:
            handle(subject, data, await process_headers(headers) if headers else None)
        except Exception:  # never into the read loop: it would take the connection down
            log.exception("a message on %s was not handled", wildcard)

    nc._process_msg = _process_msg  # type: ignore[method-assign]
    return sub
