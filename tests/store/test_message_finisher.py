"""The message finisher: a served message is marked done only once its writes landed and its
publishes were acknowledged; a refused or missing ack is republished first (MQ-8)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from nats.js.errors import APIError
from sqlalchemy.ext.asyncio import AsyncEngine

from consumers.message_finisher import TurnFinisher
from consumers.publisher import Publisher
from core.store.committer import GroupCommitter
from core.store.db import metadata
from core.store.inbox import DONE, STAGED, SqlInbox, StagedMessage
from schemas.subjects import Subjects
from tests.loop_counts import TimerCount
from tests.waiting import wait_for

ACK_TIMEOUT_S = 0.2


@pytest.fixture
async def inbox(engine: AsyncEngine) -> AsyncIterator[SqlInbox]:
    import core.store.inbox  # noqa: F401 - registers the inbox table

    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    committer = GroupCommitter(engine)
    box = SqlInbox(engine, committer)
    box.start()
    try:
        yield box
    finally:
        await box.close()
        await committer.aclose()


class Republishes:
    """The runner's republish: each call sends again, its ack given by ``ack``."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, unsettled: list[asyncio.Future[Any]]) -> None:
        self.calls += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(7)
        unsettled.append(future)


def finisher_of(inbox: SqlInbox, done: list[str]) -> TurnFinisher:
    # settle() and its timeout are all the finisher uses of the publisher: no connection needed.
    publisher = Publisher(cast(Any, None), cast(Any, None), Subjects(), timeout_s=ACK_TIMEOUT_S)
    return TurnFinisher("s1", publisher, inbox, done.append)


def staged(mid: str) -> StagedMessage:
    return StagedMessage(platform="cli", message_id=mid, session_id="s1", generation=0, payload=b"{}")


async def test_a_message_is_marked_done_only_after_its_writes_and_acks_landed(inbox: SqlInbox) -> None:
    # MQ-8: the inbox row stays staged until every ack and bookkeeping write is in.
    await inbox.stage([staged("m1")])
    done: list[str] = []
    finisher = finisher_of(inbox, done)
    loop = asyncio.get_running_loop()
    acks = [loop.create_future() for _ in range(3)]
    write = loop.create_future()
    republish = Republishes()
    finisher.spawn(staged("m1"), list(acks), [write], republish)
    assert finisher.busy
    for ack in acks:
        ack.set_result(1)
    for _ in range(5):
        await asyncio.sleep(0)
    assert done == [] and finisher.busy  # the write is still landing
    write.set_exception(RuntimeError("logged by the writer"))  # a failed write: the next one carries it
    await wait_for(lambda: done == ["m1"], what="the message finished")
    assert not finisher.busy and republish.calls == 0
    await inbox.flush()
    assert await inbox.status_of("cli", "m1") == DONE


async def test_a_refused_ack_is_republished_before_the_message_is_done(inbox: SqlInbox) -> None:
    # MQ-8: a publish the broker refused is sent again; only then is the message done.
    await inbox.stage([staged("m2")])
    done: list[str] = []
    finisher = finisher_of(inbox, done)
    ack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    republish = Republishes()
    finisher.spawn(staged("m2"), [ack], [], republish)
    ack.set_exception(APIError(code=503, description="refused"))
    await finisher.wait()
    assert done == ["m2"] and republish.calls == 1


async def test_an_ack_that_never_comes_is_given_up_and_republished(inbox: SqlInbox) -> None:
    # MQ-8: after the publisher's timeout the missing ack is cancelled and the publish sent again.
    await inbox.stage([staged("m3")])
    done: list[str] = []
    finisher = finisher_of(inbox, done)
    ack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    republish = Republishes()
    finisher.spawn(staged("m3"), [ack], [], republish)
    await wait_for(lambda: done == ["m3"], what="the message finished after a republish")
    assert ack.cancelled() and republish.calls == 1
    await finisher.wait()
    assert not finisher.busy


async def test_a_message_whose_acks_never_come_stays_staged(inbox: SqlInbox) -> None:
    # MQ-8: never acknowledged, never done: it is answered again after a restart.
    await inbox.stage([staged("m4")])
    done: list[str] = []
    finisher = finisher_of(inbox, done)
    ack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    calls: list[int] = []

    async def never_acked(unsettled: list[asyncio.Future[Any]]) -> None:
        calls.append(1)
        unsettled.append(asyncio.get_running_loop().create_future())

    finisher.spawn(staged("m4"), [ack], [], never_acked)
    await wait_for(lambda: len(calls) >= 2, what="two republishes")
    assert done == [] and finisher.busy and await inbox.status_of("cli", "m4") == STAGED


async def test_messages_whose_acks_never_come_are_each_given_up_after_their_own_timeout(inbox: SqlInbox) -> None:
    # MQ-8: several messages settling at once share one timeout timer; each is still given up (its
    # missing ack cancelled, republished) once ITS timeout passes, oldest first, and one that is
    # acknowledged meanwhile is finished without a republish.
    await inbox.stage([staged("m5"), staged("m6"), staged("m7")])
    done: list[str] = []
    finisher = finisher_of(inbox, done)
    loop = asyncio.get_running_loop()
    acks = {mid: loop.create_future() for mid in ("m5", "m6", "m7")}
    republished: list[str] = []

    def republish_of(mid: str) -> Any:
        async def republish(unsettled: list[asyncio.Future[Any]]) -> None:
            republished.append(mid)
            future: asyncio.Future[Any] = loop.create_future()
            future.set_result(7)
            unsettled.append(future)

        return republish

    for mid, ack in acks.items():
        finisher.spawn(staged(mid), [ack], [], republish_of(mid))
    acks["m5"].set_result(1)  # the oldest is acknowledged: the others' timeouts still run
    await wait_for(lambda: sorted(done) == ["m5", "m6", "m7"], what="every message finished")
    assert republished == ["m6", "m7"]
    assert acks["m6"].cancelled() and acks["m7"].cancelled()
    await finisher.wait()
    assert not finisher.busy


async def test_finishing_messages_one_after_another_arms_no_timer_per_message(inbox: SqlInbox) -> None:
    # A served message's ack timeout is one timer kept across messages (consumers/deadline.py).
    done: list[str] = []
    finisher = finisher_of(inbox, done)
    loop = asyncio.get_running_loop()
    with TimerCount() as timers:
        for i in range(30):
            ack: asyncio.Future[Any] = loop.create_future()
            finisher.spawn(staged(f"n{i}"), [ack], [], Republishes())
            ack.set_result(1)
            await asyncio.sleep(0)
    assert done == [f"n{i}" for i in range(30)]
    assert timers.armed <= 2, timers.armed
