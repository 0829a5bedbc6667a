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
