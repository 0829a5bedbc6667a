"""consumers/queued_fetch.py over a real nats-server: a pull fetch reads the delivered batch off the
subscription's queue without a task per message, in stream order, and times out as nats-py's does."""

from __future__ import annotations

import uuid
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client

from consumers.queued_fetch import take_queued_first
from tests.loop_counts import TaskCount


async def _pull(nc: Client, count: int) -> Any:
    js = nc.jetstream()
    name = "QF" + uuid.uuid4().hex[:8]
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    for i in range(count):
        await js.publish(f"{name}.in", str(i).encode())
    psub = await js.pull_subscribe(f"{name}.>", durable="reader", stream=name)
    take_queued_first(psub._sub)
    return psub


async def test_a_fetched_batch_is_read_in_order_without_a_task_per_message(nc: Client) -> None:
    psub = await _pull(nc, 60)
    got: list[bytes] = []
    with TaskCount() as tasks:
        while len(got) < 60:
            got.extend(m.data for m in await psub.fetch(60 - len(got), timeout=2.0))
    assert got == [str(i).encode() for i in range(60)]
    # nats-py's own next_msg makes two tasks per message (its own and wait_for's): 120 here.
    assert tasks.created < 20, tasks.created
    assert psub.pending_msgs == 0
    assert psub.pending_bytes == 0


async def test_an_empty_fetch_times_out_as_nats_py_does(nc: Client) -> None:
    psub = await _pull(nc, 1)
    [first] = await psub.fetch(5, timeout=1.0)
    await first.ack()
    with pytest.raises(nats.errors.TimeoutError):
        await psub.fetch(5, timeout=0.2)
