"""The checkpoint chain: every checkpoint fenced on the previous one, acks awaited late (MQ-3)."""

from __future__ import annotations

import asyncio

import pytest

from consumers.checkpoints import CheckpointChain
from consumers.deadline import Deadline
from consumers.publisher import KeptAck
from core.errors import CheckpointFailed
from tests.loop_counts import TimerCount


class FakeBroker:
    """Stores checkpoints of one subject; refuses a fence that is not the last stored sequence."""

    def __init__(self) -> None:
        self.timeout_s = 10.0
        self.last = 0
        self.sent: list[tuple[bytes, int | None]] = []
        self.pending: list[tuple[KeptAck, bytes, int | None]] = []

    async def send_checkpoint(self, session_id: str, payload: bytes, expected: int | None) -> KeptAck:
        future = KeptAck()
        self.sent.append((payload, expected))
        self.pending.append((future, payload, expected))
        return future

    def ack_all(self) -> None:
        for future, _payload, expected in self.pending:
            if expected is not None and expected != self.last:
                future.set_exception(CheckpointFailed("wrong last sequence"))
            else:
                self.last += 10
                future.set_result(self.last)
        self.pending.clear()

    async def checkpoint_acked(
        self, session_id: str, acked: KeptAck, expected: int | None, deadline: Deadline | None = None
    ) -> int:
        return await acked.result(self.timeout_s, deadline)


async def test_each_checkpoint_is_sent_at_once_and_fenced_on_the_previous_ones_ack() -> None:
    # MQ-3: checkpoints go out when their step is journaled; the next one waits for the
    # previous ack only to learn its fence, so a turn's steps overlap the broker round trips.
    broker = FakeBroker()
    chain = CheckpointChain("s", broker)
    chain.reset(0)
    await chain.publish(b"one")
    assert broker.sent == [(b"one", 0)]  # sent, not yet acknowledged
    second = asyncio.ensure_future(chain.publish(b"two"))
    await asyncio.sleep(0)
    assert not second.done() and len(broker.sent) == 1  # waits for the first ack (its fence)
    broker.ack_all()
    await second
    assert broker.sent == [(b"one", 0), (b"two", 10)]
    settling = asyncio.ensure_future(chain.settle())
    await asyncio.sleep(0)
    assert not settling.done()
    broker.ack_all()
    await settling
    assert chain.seq == 20


async def test_a_refused_checkpoint_fails_the_next_step_and_a_barrier_waits_for_its_ack() -> None:
    # MQ-3: a stale owner's checkpoint is refused by the fence; the refusal surfaces before
    # anything else is published, and before a tool runs (barrier) the checkpoint is stored.
    broker = FakeBroker()
    broker.last = 50  # another owner wrote since this one loaded
    chain = CheckpointChain("s", broker)
    chain.reset(0)
    await chain.publish(b"stale")
    broker.ack_all()
    with pytest.raises(CheckpointFailed):
        await chain.publish(b"next")
    assert [p for p, _ in broker.sent] == [b"stale"]

    chain.reset(50)
    barrier = asyncio.ensure_future(chain.publish(b"before a tool", barrier=True))
    await asyncio.sleep(0)
    assert not barrier.done()
    broker.ack_all()
    await barrier
    assert chain.seq == 60


async def test_reset_drops_an_unacknowledged_checkpoint() -> None:
    # MQ-3: after a reload the chain continues from the stored sequence, not from a lost send.
    broker = FakeBroker()
    chain = CheckpointChain("s", broker)
    chain.reset(0)
    await chain.publish(b"lost")
    chain.reset(30)
    await chain.settle()  # nothing in flight any more
    await chain.publish(b"after reload")
    assert broker.sent[-1] == (b"after reload", 30)


async def test_a_cancelled_wait_keeps_the_ack_for_the_next_settle() -> None:
    # MQ-3: cancelling the task that waits (shutdown) does not lose the sequence of what was sent.
    broker = FakeBroker()
    chain = CheckpointChain("s", broker)
    chain.reset(0)
    await chain.publish(b"sent")
    waiting = asyncio.ensure_future(chain.settle())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    broker.ack_all()
    await chain.settle()
    assert chain.seq == 10


async def test_an_ack_that_never_comes_fails_the_wait_within_the_timeout() -> None:
    # MQ-3: a checkpoint the broker never answers is not waited for forever; the runner reloads.
    acked = KeptAck()
    with pytest.raises(TimeoutError):
        await acked.result(0.05)
    acked.set_result(5)  # a late ack: the next wait has it
    assert await acked.result(0.05) == 5


async def test_an_unanswered_checkpoint_is_given_up_so_the_ack_table_forgets_it() -> None:
    # StreamAcks keeps an ack's waiter until it is answered or done: a chain that stopped waiting
    # (timeout) marks it done, so the sweep drops it instead of holding it for the process's life.
    broker = FakeBroker()
    broker.timeout_s = 0.05
    chain = CheckpointChain("s", broker)
    chain.reset(0)
    await chain.publish(b"never answered")
    with pytest.raises(TimeoutError):
        await chain.settle()
    ack = broker.pending[0][0]
    assert ack.done()
    await chain.settle()  # nothing in flight any more


async def test_waiting_for_the_acks_of_many_checkpoints_arms_no_timer_per_wait() -> None:
    # Each settle that finds its ack still out waits with the publisher's timeout; that timeout is one
    # timer kept across the waits (consumers/deadline.py), not one armed and cancelled per wait.
    broker = FakeBroker()
    chain = CheckpointChain("s", broker)
    chain.reset(0)
    with TimerCount() as timers:
        for i in range(30):
            await chain.publish(f"step {i}".encode())
            settling = asyncio.ensure_future(chain.settle())
            await asyncio.sleep(0)
            assert not settling.done()  # the ack is still out: the settle waits
            broker.ack_all()
            await settling
    assert chain.seq == 300
    assert timers.armed <= 2, timers.armed


def _armed_deadline_timers() -> int:
    loop = asyncio.get_running_loop()
    return sum(
        1 for h in loop._scheduled  # type: ignore[attr-defined]
        if not h.cancelled() and isinstance(getattr(h._callback, "__self__", None), Deadline)
    )


async def test_a_chain_whose_actor_ended_leaves_no_timer_armed() -> None:
    # An evicted session's chain must not keep its ack-wait timer (and so its handle, context and
    # deadline) in the loop until it fires: 10,000 touched sessions kept 17,000 of them.
    broker = FakeBroker()
    chain = CheckpointChain("s", broker)
    chain.reset(0)
    await chain.publish(b"one")
    settling = asyncio.ensure_future(chain.settle())
    await asyncio.sleep(0)
    broker.ack_all()
    await settling
    assert _armed_deadline_timers() == 1  # kept across waits while the session lives
    chain.stop_timer()
    assert _armed_deadline_timers() == 0
