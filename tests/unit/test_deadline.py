"""consumers/deadline.py: one wait's timeout at a time, kept as one timer across the waits."""

from __future__ import annotations

import asyncio

from consumers.deadline import Deadline
from tests.loop_counts import TimerCount
from tests.waiting import wait_for


async def test_a_wait_that_outlasts_its_timeout_expires_once() -> None:
    deadline = Deadline()
    expired: list[str] = []
    deadline.start(0.01, lambda: expired.append("first"))
    await wait_for(lambda: expired, timeout_s=5, what="the deadline to pass")
    await asyncio.sleep(0.02)
    assert expired == ["first"]


async def test_a_stopped_wait_never_expires_and_a_later_wait_gets_its_own_full_timeout() -> None:
    deadline = Deadline()
    expired: list[str] = []
    loop = asyncio.get_running_loop()
    deadline.start(0.05, lambda: expired.append("stopped"))
    deadline.stop()
    await asyncio.sleep(0.03)
    started = loop.time()
    deadline.start(0.05, lambda: expired.append(f"second {loop.time() - started >= 0.05}"))
    await wait_for(lambda: expired, timeout_s=5, what="the second wait's deadline")
    # the first timer fired before the second wait's deadline and re-armed for it
    assert expired == ["second True"]


async def test_a_shorter_wait_after_a_longer_one_arms_an_earlier_timer() -> None:
    deadline = Deadline()
    expired: list[str] = []
    deadline.start(3600.0, lambda: expired.append("long"))
    deadline.stop()
    deadline.start(0.01, lambda: expired.append("short"))
    await wait_for(lambda: expired, timeout_s=5, what="the short wait's deadline")
    assert expired == ["short"]
    deadline.close()


async def test_many_short_waits_arm_one_timer() -> None:
    deadline = Deadline()
    with TimerCount() as timers:
        for _ in range(100):
            deadline.start(10.0, lambda: None)
            await asyncio.sleep(0)
            deadline.stop()
    assert timers.armed == 1
    deadline.close()
