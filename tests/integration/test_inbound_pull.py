"""consumers/inbound_pull.py over a real nats-server: a delivered message is handed over while its pull
request stays open (no wait for a terminating status, the rest of the batch or the expiry), a request
asks at most the room, an expired one is replaced, a dropped one delivers nothing more, and a refused
pull is raised."""

from __future__ import annotations

import asyncio
import uuid

import orjson
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

from consumers import inbound_pull
from consumers.inbound_pull import InboundPull, PullRefused
from consumers.nats_flush import flush
from tests.loop_counts import TaskCount
from tests.waiting import wait_for


class Requests:
    """Every pull request the server is sent for one consumer, seen by a plain subscriber."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, int]] = []

    async def attach(self, nc: Client, stream: str) -> Requests:
        async def seen(msg: Msg) -> None:
            self.bodies.append(orjson.loads(msg.data))

        await nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.reader", cb=seen)
        await flush(nc)
        return self


async def _stream(nc: Client) -> str:
    js = nc.jetstream()
    name = "IP" + uuid.uuid4().hex[:8]
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    await js.add_consumer(name, ConsumerConfig(durable_name="reader", ack_policy=AckPolicy.EXPLICIT, ack_wait=30))
    return name


async def _pull(nc: Client, stream: str, expires_s: float = 30.0) -> InboundPull:
    return await InboundPull(nc, "$JS.API", stream, "reader", expires_s).open()


async def _take_one_by_one(pull: InboundPull, room: int, want: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < want:
        got.extend(m.data for m in await pull.take(room - len(got), timeout=10))
    return got


async def test_a_delivered_message_is_handed_over_while_its_request_stays_open(nc: Client) -> None:
    stream = await _stream(nc)
    requests = await Requests().attach(nc, stream)
    pull = await _pull(nc, stream)
    js = nc.jetstream()
    for i in range(3):
        taking = asyncio.ensure_future(pull.take(10, timeout=30))
        await wait_for(lambda: requests.bodies, what="the pull request to reach the server")  # the first take's
        await js.publish(f"{stream}.in", str(i).encode())
        # Returned on delivery: not after the rest of the batch (10) or the request's expiry (30 s).
        [msg] = await asyncio.wait_for(taking, 10)
        assert msg.data == str(i).encode()
        assert pull.owed == 9 - i
    assert requests.bodies == [{"batch": 10, "expires": 30_000_000_000}]  # one request served all three
    await pull.close()


async def test_a_request_asks_at_most_the_room_and_the_next_goes_out_once_it_is_served(nc: Client) -> None:
    stream = await _stream(nc)
    js = nc.jetstream()
    for i in range(5):
        await js.publish(f"{stream}.in", str(i).encode())
    requests = await Requests().attach(nc, stream)
    pull = await _pull(nc, stream)
    assert await _take_one_by_one(pull, 3, 3) == [b"0", b"1", b"2"]
    assert pull.owed == 0  # served in full: no request open
    info = await js.consumer_info(stream, "reader")
    assert info.num_ack_pending == 3 and info.num_pending == 2  # the other two were not delivered
    assert await _take_one_by_one(pull, 10, 2) == [b"3", b"4"]
    assert [b["batch"] for b in requests.bodies] == [3, 10]
    await pull.close()


async def test_a_delivered_batch_is_taken_in_order_without_a_task_per_message(nc: Client) -> None:
    stream = await _stream(nc)
    js = nc.jetstream()
    for i in range(60):
        await js.publish(f"{stream}.in", str(i).encode())
    pull = await _pull(nc, stream)
    with TaskCount() as tasks:
        got = await _take_one_by_one(pull, 60, 60)
    assert got == [str(i).encode() for i in range(60)]
    # nats-py's own next_msg makes two tasks per message (its own and wait_for's): 120 here.
    assert tasks.created < 20, tasks.created
    assert pull._sub is not None and pull._sub.pending_msgs == 0 and pull._sub.pending_bytes == 0
    await pull.close()


async def test_an_expired_request_is_replaced_within_one_take(nc: Client) -> None:
    stream = await _stream(nc)
    requests = await Requests().attach(nc, stream)
    pull = await _pull(nc, stream, expires_s=0.2)
    taking = asyncio.ensure_future(pull.take(5, timeout=30))
    # The first request expires (its 408 ends it) and the take asks again, still waiting.
    await wait_for(lambda: len(requests.bodies) >= 2, what="a second request after the first expired")
    await nc.jetstream().publish(f"{stream}.in", b"late")
    [msg] = await asyncio.wait_for(taking, 10)
    assert msg.data == b"late"
    await pull.close()


async def test_a_request_that_ended_between_takes_is_replaced_by_the_next_take(
    nc: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 408 of an expired request can be queued while the caller is busy with the last batch: the next
    take must ask again, not wait on a request the server has ended (nothing would be delivered until the
    request was taken for lost, a grace made longer than the test here)."""
    monkeypatch.setattr(inbound_pull, "LOST_REQUEST_GRACE_S", 60.0)
    stream = await _stream(nc)
    requests = await Requests().attach(nc, stream)
    pull = await _pull(nc, stream, expires_s=0.2)
    with pytest.raises(TimeoutError):
        await pull.take(5, timeout=0.01)
    assert pull._sub is not None
    await wait_for(lambda: pull._sub is not None and pull._sub.pending_msgs == 1, what="the request's 408 queued")
    taking = asyncio.ensure_future(pull.take(5, timeout=30))
    await wait_for(lambda: len(requests.bodies) == 2, what="a second request from the next take")
    await nc.jetstream().publish(f"{stream}.in", b"next")
    [msg] = await asyncio.wait_for(taking, 10)
    assert msg.data == b"next"
    await pull.close()


async def test_a_take_with_nothing_delivered_times_out(nc: Client) -> None:
    stream = await _stream(nc)
    pull = await _pull(nc, stream)
    with pytest.raises(TimeoutError):
        await pull.take(5, timeout=0.2)
    await pull.close()


async def test_a_dropped_request_delivers_nothing_more(nc: Client) -> None:
    stream = await _stream(nc)
    requests = await Requests().attach(nc, stream)
    pull = await _pull(nc, stream)
    with pytest.raises(TimeoutError):
        await pull.take(5, timeout=0.1)  # a request for 5 is open on the server
    assert await pull.drop() == [] and pull.owed == 0
    await nc.jetstream().publish(f"{stream}.in", b"after")
    # The abandoned request has no interest left: the message waits for the next request, which the next
    # take sends, instead of going to the old inbox (and coming back only after the 30 s ack wait).
    [msg] = await pull.take(1, timeout=10)
    assert msg.data == b"after"
    assert len(requests.bodies) == 2
    await pull.close()


async def test_a_drop_gives_back_what_was_delivered_and_not_taken(nc: Client) -> None:
    stream = await _stream(nc)
    js = nc.jetstream()
    pull = await _pull(nc, stream)
    first, _ = await asyncio.gather(pull.take(5, timeout=10), js.publish(f"{stream}.in", b"0"))
    assert [m.data for m in first] == [b"0"]
    await js.publish(f"{stream}.in", b"1")
    await wait_for(lambda: pull._sub is not None and pull._sub.pending_msgs == 1, what="message 1 delivered")
    assert [m.data for m in await pull.drop()] == [b"1"]
    await pull.close()


async def test_a_deleted_consumer_is_a_refused_pull(nc: Client) -> None:
    stream = await _stream(nc)
    requests = await Requests().attach(nc, stream)
    pull = await _pull(nc, stream)
    taking = asyncio.ensure_future(pull.take(5, timeout=30))
    await wait_for(lambda: requests.bodies, what="the pull request to reach the server")
    await nc.jetstream().delete_consumer(stream, "reader")
    with pytest.raises(PullRefused, match="409"):
        await asyncio.wait_for(taking, 10)
    await pull.close()
