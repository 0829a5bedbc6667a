"""Start-time recovery of the inbound consumer's in-flight range, in stream order.

A process that dies after fetching messages but before staging them leaves them
delivered and unacknowledged: JetStream redelivers them only after the ack wait,
behind newer messages of the same sessions (DESIGN.md, "Known pitfalls"). So on
every start or takeover, before the fetch loop serves anything new, the range
``ack floor + 1 .. last delivered`` is read from the inbound stream by sequence
and put through the loop's own validate → record → stage → hand-off path, in
order. Staging is idempotent on the message id: messages of the range that were
staged already are not handed off again, and when JetStream later redelivers the
recovered ones the loop recognises them and just acks them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

log = logging.getLogger(__name__)

ProcessBatch = Callable[[list[Msg]], Awaitable[None]]


class RecoveredMsg(Msg):
    """A stream message read by sequence: it was never delivered to us, so acks are no-ops.

    Its reply subject has the JetStream ack form only so ``metadata`` (stream sequence) works.
    """

    async def ack(self) -> None:
        return None

    async def ack_sync(self, timeout: float = 1.0) -> Msg:  # noqa: ASYNC109 - nats-py's Msg.ack_sync signature
        return self

    async def nak(self, delay: int | float | None = None) -> None:
        return None

    async def term(self) -> None:
        return None

    async def in_progress(self) -> None:
        return None


async def inflight_range(js: JetStreamContext, stream: str, consumer: str) -> tuple[int, int]:
    """(first, last) stream sequences delivered but not acknowledged in order; empty when first > last."""
    try:
        info = await js.consumer_info(stream, consumer)
    except NotFoundError:
        return (1, 0)
    floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
    last = info.delivered.stream_seq if info.delivered is not None else 0
    return ((floor or 0) + 1, last or 0)


async def read_recovered(nc: Client, js: JetStreamContext, stream: str, consumer: str, seq: int) -> Msg | None:
    """Stream message ``seq`` as a ``RecoveredMsg``, or None when the stream no longer holds it."""
    try:
        raw = await js.get_msg(stream, seq)
    except NotFoundError:
        return None  # removed (max age, purge): nothing to recover
    reply = f"$JS.ACK.{stream}.{consumer}.1.{seq}.0.0.0"
    return RecoveredMsg(
        _client=nc, subject=raw.subject or "", reply=reply, data=raw.data or b"", headers=raw.headers
    )


async def recover_inflight(
    nc: Client, js: JetStreamContext, stream: str, consumer: str, process: ProcessBatch, chunk: int
) -> int:
    """Put the consumer's in-flight range through ``process`` in stream order; returns messages read.

    A failure is logged and ends the recovery: nothing is lost (JetStream still redelivers the
    range after the ack wait), only the per-session order of those messages is no longer ensured.
    """
    try:
        return await _recover(nc, js, stream, consumer, process, chunk)
    except Exception as exc:
        log.warning("recovering the in-flight inbound range failed (%r); JetStream redelivers it", exc)
        return 0


async def _recover(
    nc: Client, js: JetStreamContext, stream: str, consumer: str, process: ProcessBatch, chunk: int
) -> int:
    first, last = await inflight_range(js, stream, consumer)
    if first > last:
        return 0
    log.info("recovering in-flight inbound messages %d..%d of %s before fetching", first, last, stream)
    done = 0
    for start in range(first, last + 1, max(chunk, 1)):
        seqs = range(start, min(start + max(chunk, 1), last + 1))
        read = await asyncio.gather(*(read_recovered(nc, js, stream, consumer, s) for s in seqs))
        msgs = [m for m in read if m is not None]
        if msgs:
            await process(msgs)
        done += len(msgs)
    log.info("recovered %d in-flight inbound messages", done)
    return done
