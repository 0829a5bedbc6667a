"""Pull fetches that take already-delivered messages without a task per message.

nats-py's ``PullSubscription.fetch(batch)`` reads each message of a batch with
``Subscription.next_msg``, which wraps even a message already in the subscription's
pending queue in a task (``create_task``), ``asyncio.wait_for`` (a second task, a
future and a timer) and a ``uuid4`` name: about 2 tasks, 10 loop callbacks and 20
µs of CPU per fetched message. ``take_queued_first`` gives one subscription a
``next_msg`` that hands over a queued message at once, with nats-py's own
bookkeeping (pending bytes, ``task_done``); an empty queue or a closed connection
takes nats-py's own ``next_msg`` (its timeout, its cancellation on close). The fetch
protocol itself (no-wait probe, lingering request, status messages) stays nats-py's.
"""

from __future__ import annotations

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

__all__ = ["take_queued_first"]


def take_queued_first(sub: Subscription) -> None:
    """Make ``sub.next_msg`` return a message already queued without a task, a timer or a wait."""
    waiting_next_msg = sub.next_msg
    queue = sub._pending_queue
    conn = sub._conn

    async def next_msg(timeout: float | None = 1.0) -> Msg:  # noqa: ASYNC109 (nats-py's signature)
        if queue.empty() or conn.is_closed:
            return await waiting_next_msg(timeout)
        msg: Msg = queue.get_nowait()
        sub._pending_size -= len(msg.data)
        queue.task_done()  # as nats-py's next_msg: consumed once handed over
        return msg

    sub.next_msg = next_msg  # type: ignore[method-assign]
