"""Reply order: a session's reply is sent only once its earlier replies are stored (consumers/reply_order.py)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from consumers import reply_order
from consumers.publisher import Publisher
from consumers.reply_order import ReplyOrder
from core.errors import Unavailable
from schemas.subjects import Subjects
from schemas.wire import OutboundReply


class FakeOutbound:
    """The outbound stream: stores what is sent unless the next send is to be lost (its ack fails)."""

    def __init__(self) -> None:
        self.subjects = Subjects("t")
        self.js = None
        self.timeout_s = 1.0
        self.stored: list[tuple[str, int]] = []
        self.lose: set[tuple[str, int]] = set()

    async def outbound(self, platform: str, reply: OutboundReply) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        key = (reply.turn_id, reply.seq)
        if key in self.lose:
            self.lose.discard(key)
            future.set_exception(TimeoutError())
        else:
            self.stored.append(key)
            future.set_result(len(self.stored))
        return future

    async def settle(self, futures: list[asyncio.Future[Any]]) -> bool:
        await asyncio.wait(futures)
        return all(not f.cancelled() and f.exception() is None for f in futures)


def reply(turn: str, seq: int, generation: int = 0) -> OutboundReply:
    return OutboundReply(session_id="s", generation=generation, turn_id=turn, seq=seq, reply_to="m", text=f"{turn}/{seq}")


async def send(order: ReplyOrder, broker: FakeOutbound, r: OutboundReply) -> None:
    await order.earlier_stored(f"s:{r.turn_id}:{r.seq}")
    order.sent("cli", r, await broker.outbound("cli", r))


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> FakeOutbound:
    fake = FakeOutbound()

    async def stored_reply_seqs(js: object, stream: str, subject: str, sid: str, turn: str, since: str | None) -> set[int]:
        return {seq for t, seq in fake.stored if t == turn}

    monkeypatch.setattr(reply_order, "stored_reply_seqs", stored_reply_seqs)
    return fake


async def test_a_lost_reply_is_sent_again_before_the_next_reply_of_its_turn_and_of_later_turns(
    broker: FakeOutbound,
) -> None:
    order = ReplyOrder("s", cast(Publisher, broker), lambda sid: 0)
    broker.lose = {("t1", 0)}
    for r in (reply("t1", 0), reply("t1", 1), reply("t2", 0)):
        await send(order, broker, r)
    assert broker.stored == [("t1", 0), ("t1", 1), ("t2", 0)]
    await asyncio.sleep(0)  # the last ack's callback
    assert order.all_stored


async def test_a_reply_whose_ack_was_lost_but_which_was_stored_is_not_sent_twice(broker: FakeOutbound) -> None:
    order = ReplyOrder("s", cast(Publisher, broker), lambda sid: 0)
    first = reply("t1", 0)
    acked: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    broker.stored.append(("t1", 0))  # stored; the ack never came
    acked.set_exception(TimeoutError())
    order.sent("cli", first, acked)
    await send(order, broker, reply("t2", 0))
    assert broker.stored == [("t1", 0), ("t2", 0)]


async def test_a_lost_reply_of_a_deleted_generation_is_never_sent_again(broker: FakeOutbound) -> None:
    # SM-22: the session was deleted (generation 1 now) after its generation-0 reply was lost.
    order = ReplyOrder("s", cast(Publisher, broker), lambda sid: 1)
    broker.lose = {("t1", 0)}
    await send(order, broker, reply("t1", 0, generation=0))
    await send(order, broker, reply("t2", 0, generation=1))
    assert broker.stored == [("t2", 0)]


async def test_the_next_reply_waits_while_the_lost_one_cannot_be_stored(broker: FakeOutbound) -> None:
    order = ReplyOrder("s", cast(Publisher, broker), lambda sid: 0)
    broker.lose = {("t1", 0)}
    await send(order, broker, reply("t1", 0))
    broker.lose = {("t1", 0)}  # the stream still does not take it
    with pytest.raises(Unavailable):
        await send(order, broker, reply("t2", 0))
    assert broker.stored == []
    await send(order, broker, reply("t2", 0))  # the message's retry: stored now, in order
    assert broker.stored == [("t1", 0), ("t2", 0)]
