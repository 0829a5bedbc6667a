"""10.3: closing the registry ends each actor as soon as its item is done, not after its idle wait."""

from __future__ import annotations

import asyncio
from typing import Any

from consumers.actors import ActorRegistry
from tests.unit.engine.test_actor_mailbox import RecordingRunner
from tests.waiting import wait_for


class _Staged:
    session_id = "s"

    def __repr__(self) -> str:
        return "m1"


async def test_close_returns_once_the_running_item_finishes_although_the_drain_timeout_is_long() -> None:
    gate = asyncio.Event()
    runner = RecordingRunner(gate)
    # Idle wait and drain timeout far beyond the test's timeout: only ending after the item can pass.
    registry = ActorRegistry(lambda sid: runner, idle_s=3600.0)  # type: ignore[arg-type,return-value]
    inbound: Any = type("In", (), {"platform": "cli", "id": "x"})()
    await registry.deliver(_Staged(), inbound)  # type: ignore[arg-type]
    await wait_for(lambda: runner.running != 0, interval_s=0, what="the item to run")
    closing = asyncio.ensure_future(registry.close(drain_timeout_s=3600.0))
    await asyncio.sleep(0)
    assert not closing.done()  # the running turn may finish
    gate.set()
    await asyncio.wait_for(closing, 10)
    assert runner.log == ["message:m1"] and len(registry) == 0


async def test_close_with_a_zero_drain_timeout_cancels_the_running_item() -> None:
    runner = RecordingRunner(asyncio.Event())  # never released
    registry = ActorRegistry(lambda sid: runner, idle_s=3600.0)  # type: ignore[arg-type,return-value]
    inbound: Any = type("In", (), {"platform": "cli", "id": "x"})()
    await registry.deliver(_Staged(), inbound)  # type: ignore[arg-type]
    await wait_for(lambda: runner.running != 0, interval_s=0, what="the item to run")
    await asyncio.wait_for(registry.close(drain_timeout_s=0), 10)
    assert len(registry) == 0
