"""A flush that is a barrier: when it returns, the server has processed every command sent before it.

nats-py's ``Client.flush`` writes its PING straight to the socket, while ``subscribe`` and
``publish`` only queue their commands for the connection's flusher task. A PING sent right
after a ``subscribe`` therefore overtakes the SUB: the PONG comes back, and another
connection's message published in the next moment can reach the server before the SUB does
and be lost to it (reproduced on loopback with nats-py 2.16, whose ``_send_ping`` is 2.15's: 26 of
1,000 tries with fresh connections, 92 of 1,000 with two long-lived ones).

``flush`` here first waits for the flusher to write what is queued (nats-py's own
``_flush_pending(force_flush=True)``, the path ``publish`` takes when its buffer is full),
then sends the PING behind it. tests/integration/test_nats_flush.py fails if nats-py's
internals change.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nats (with aiohttp) costs the CLI ~0.2 s to import: only when a command connects
    from nats.aio.client import Client

__all__ = ["flush"]

TIMEOUT_S = 10  # nats-py's own flush default, for each of the two waits


async def flush(nc: Client) -> None:
    """Wait until the server has processed every command ``nc`` queued before this call
    (nats-py's FlushTimeoutError when the queue is not written, or the PONG not back, in time)."""
    if nc.is_connected:
        try:
            async with asyncio.timeout(TIMEOUT_S):
                await nc._flush_pending(force_flush=True)
        except TimeoutError:
            from nats import errors

            raise errors.FlushTimeoutError from None
    await nc.flush(TIMEOUT_S)
