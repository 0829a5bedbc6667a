"""A message JetStream gave up on (MAX_DELIVERIES) is read from the stream only while its partition is
ours: read while the partition is not, the fenced loop would nack it — a no-op for a message read by
sequence — and it would never be answered (seen on a 3-node cluster with a node SIGKILLed)."""

from __future__ import annotations

import asyncio

from nats.aio.msg import Msg

from consumers.inbound_loop import InboundLoop
from consumers.settings import Settings
from schemas.subjects import Subjects
from tests.waiting import wait_for


class Fence:
    def __init__(self) -> None:
        self.ours = False
        self.looked = 0

    def __call__(self) -> bool:
        self.looked += 1
        return self.ours


def _loop(fence: Fence) -> tuple[InboundLoop, list[bool]]:
    async def handoff(*_: object) -> None:
        return None

    loop = InboundLoop(
        None, Settings(), Subjects("t"), None, None, None, handoff, fence=fence,  # type: ignore[arg-type]
    )
    admitted_while_ours: list[bool] = []

    async def admit(msgs: list[Msg]) -> None:
        admitted_while_ours.append(fence.ours)

    loop._admit_batch = admit  # type: ignore[method-assign]
    return loop, admitted_while_ours


async def test_a_given_up_message_is_read_only_once_its_partition_is_ours_again() -> None:
    fence = Fence()
    loop, admitted = _loop(fence)
    reads = 0

    async def read() -> list[Msg]:
        nonlocal reads
        reads += 1
        return [Msg(_client=None, subject="t.inbound.cli.s")]  # type: ignore[arg-type]

    task = asyncio.ensure_future(loop.process_read(read))
    await wait_for(lambda: fence.looked >= 3, timeout_s=5, interval_s=0, what="the fence to be looked at")
    assert reads == 0 and not task.done()
    fence.ours = True
    await asyncio.wait_for(task, 5)
    assert reads == 1 and admitted == [True]


async def test_a_given_up_message_is_not_read_when_its_loop_stops_before_the_partition_is_ours() -> None:
    """Left in the stream below the consumer's ack floor, where the next owner's in-flight recovery reads it."""
    fence = Fence()
    loop, admitted = _loop(fence)
    reads = 0

    async def read() -> list[Msg]:
        nonlocal reads
        reads += 1
        return []

    task = asyncio.ensure_future(loop.process_read(read))
    await wait_for(lambda: fence.looked >= 1, timeout_s=5, interval_s=0, what="the fence to be looked at")
    await loop.stop(drain_timeout_s=0)
    await asyncio.wait_for(task, 5)
    assert reads == 0 and admitted == []


class OpenPull:
    """An InboundPull stand-in whose open request has delivered one message not yet taken."""

    def __init__(self, fence: Fence, stopping: asyncio.Event) -> None:
        self.fence = fence
        self.stopping = stopping
        self.owed = 4
        self.taken_while_not_ours = 0
        self.drops = 0
        self.takes = asyncio.Event()

    async def take(self, room: int, timeout: float) -> list[Msg]:  # noqa: ASYNC109
        self.taken_while_not_ours += not self.fence.ours
        self.takes.set()
        await self.stopping.wait()  # nothing more arrives before the loop stops
        raise TimeoutError

    async def drop(self) -> list[Msg]:
        self.drops += 1
        self.owed = 0
        return [Msg(_client=None, subject="t.inbound.cli.s")]  # type: ignore[arg-type]

    async def close(self) -> None:
        return None


async def test_a_lost_partition_drops_the_open_pull_request_and_gives_back_what_it_delivered() -> None:
    """Left open, the request would keep delivering the partition's messages to a loop that can only
    nack them, each delivery counting towards MaxDeliver; the one it delivered goes back (nacked)."""
    fence = Fence()
    loop, admitted = _loop(fence)
    pull = OpenPull(fence, loop._stopping)

    async def bind() -> OpenPull:
        return pull

    loop._bind = bind  # type: ignore[assignment,method-assign]
    loop.start()
    await wait_for(lambda: fence.looked >= 3, timeout_s=5, interval_s=0, what="the loop to wait for its partition")
    assert pull.drops == 1 and admitted == [False]  # dropped once, its message admitted while not ours: nacked
    fence.ours = True
    await asyncio.wait_for(pull.takes.wait(), 5)
    assert pull.taken_while_not_ours == 0
    await loop.stop(drain_timeout_s=0)
