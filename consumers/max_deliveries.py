"""The inbound consumer's MAX_DELIVERIES advisory: the message is served anyway, never silently parked.

JetStream stops delivering a message once it was delivered ``TURNSTILE_MAX_DELIVER`` times without an
ack (fetched batches lost with a dying connection, a process dying before staging it again and again) and
publishes ``$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>``. Nothing redelivers it after
that, and the consumer's ack floor stays below it, so only a later start's in-flight recovery would find it.
The owner listens to the advisory, logs a warning and puts the message, read from the stream by its
sequence, through the inbound path (validate → record → stage → hand-off) as the in-flight recovery does:
staging is idempotent, so a message that was staged already is not served twice. The loop's admission turn
is taken when the advisory is handled, before the stream read: a session's next message, fetched while the
message is read, is admitted after it (per-session order). Newer messages fetched before the advisory
arrived (during the ack waits) are not held back: they have gone on already.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from consumers.inflight import read_recovered

log = logging.getLogger(__name__)

ADVISORY = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"

# ``InboundLoop.process_read``: admits what the read returns ahead of every batch fetched after the call.
ProcessRead = Callable[[Callable[[], Awaitable[list[Msg]]]], Awaitable[None]]


async def watch_max_deliveries(
    nc: Client, js: JetStreamContext, stream: str, consumer: str, process: ProcessRead, fenced: asyncio.Event
) -> Subscription:
    """Subscribe to the advisory of ``stream``/``consumer``; ends with the connection (or unsubscribe)."""

    async def on_advisory(msg: Msg) -> None:
        try:
            body = orjson.loads(msg.data)
            seq = int(body["stream_seq"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.warning("unreadable max-deliveries advisory: %r", msg.data[:200])
            return
        if fenced.is_set():
            return  # not the owner now: the new owner's in-flight recovery reads it
        log.warning(
            "inbound message %d of %s reached max deliveries (%s) without an ack; serving it from the stream",
            seq, stream, body.get("deliveries"),
        )

        async def read() -> list[Msg]:
            recovered = await read_recovered(nc, js, stream, consumer, seq)
            if recovered is None:
                log.warning("inbound message %d is no longer in %s (max age or purge)", seq, stream)
                return []
            return [recovered]

        # Nothing above suspends: the loop's turn is taken in the step that handles the advisory, so no
        # message the connection received after it is admitted first.
        try:
            await process(read)
        except Exception as exc:
            log.warning("serving inbound message %d after max deliveries failed (%r); the next start recovers it", seq, exc)

    return await nc.subscribe(f"{ADVISORY}.{stream}.{consumer}", cb=on_advisory)
