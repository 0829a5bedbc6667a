"""consumers/inline_delivery.py over a real nats-server: a subscription's messages reach a plain
function in the read loop (no task, no queue), with nats-py's headers; other subscriptions are untouched."""

from __future__ import annotations

import asyncio
import uuid

from nats.aio.client import Client
from nats.aio.msg import Msg

from consumers.inline_delivery import subscribe_inline
from tests.waiting import wait_for


async def test_messages_reach_the_handler_inline_and_other_subscriptions_keep_nats_py_s_path(nc: Client) -> None:
    base = f"il.{uuid.uuid4().hex[:8]}"
    inline: list[tuple[bytes, bytes, dict[str, str] | None]] = []
    ran_in: set[asyncio.Task[object] | None] = set()
    others: asyncio.Queue[Msg] = asyncio.Queue()

    def handle(subject: bytes, data: bytes, headers: dict[str, str] | None) -> None:
        ran_in.add(asyncio.current_task())
        inline.append((subject, data, headers))

    sub = await subscribe_inline(nc, f"{base}.acks.*", handle)
    await nc.subscribe(f"{base}.other", cb=others.put)
    for i in range(50):
        await nc.publish(f"{base}.acks.{i}", str(i).encode())
    await nc.publish(f"{base}.acks.h", b"", headers={"Status-Like": "x"})
    await nc.publish(f"{base}.other", b"still nats-py")
    other = await asyncio.wait_for(others.get(), 5)
    await wait_for(lambda: len(inline) >= 51, timeout_s=5, interval_s=0.01, what="the 51 messages handled inline")
    assert [(s, d) for s, d, _ in inline[:50]] == [(f"{base}.acks.{i}".encode(), str(i).encode()) for i in range(50)]
    assert all(h is None for _, _, h in inline[:50])
    assert inline[50] == (f"{base}.acks.h".encode(), b"", {"Status-Like": "x"})
    assert other.data == b"still nats-py"
    # In the client's read loop: no subscription task (nats-py's path: a queue and a task wake-up per message).
    assert ran_in == {nc._reading_task}
    assert sub._wait_for_msgs_task is None
    assert sub.pending_msgs == 0


async def test_a_handler_that_raises_does_not_take_the_connection_down(nc: Client) -> None:
    base = f"il.{uuid.uuid4().hex[:8]}"
    seen: list[bytes] = []

    def handle(subject: bytes, data: bytes, headers: dict[str, str] | None) -> None:
        seen.append(data)
        if data == b"boom":
            raise RuntimeError("boom")

    await subscribe_inline(nc, f"{base}.*", handle)
    await nc.publish(f"{base}.a", b"boom")
    await nc.publish(f"{base}.b", b"after")
    await wait_for(lambda: len(seen) >= 2, timeout_s=5, interval_s=0.01, what="both messages handled")
    assert seen == [b"boom", b"after"]
    assert nc.is_connected


def test_the_nats_py_internals_it_hooks_are_there() -> None:
    import inspect

    params = list(inspect.signature(Client._process_msg).parameters)
    assert params == ["self", "sid", "subject", "reply", "data", "headers"], params
    assert asyncio.iscoroutinefunction(Client._process_headers)
    assert "_reading_task" in vars(Client())  # the test above: the handler runs in it
