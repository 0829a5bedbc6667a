"""SM-21 in the actor registry: a deletion stops the running item, waits for it, and holds the session."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from consumers.actors import ActorRegistry
from core.engine.policy import MidTurnAction
from tests.integration.harness import wait_for


class StoppableRunner:
    """Stands in for TurnRunner: an item runs until it is stopped, then takes until ``wind_down`` is set."""

    def __init__(self, *, obey_stop: bool = True) -> None:
        self.log: list[str] = []
        self.running = 0
        self.stop = asyncio.Event()
        self.wind_down = asyncio.Event()
        self.obey_stop = obey_stop

    def notice_arrival(self, inbound: Any, *, busy: bool) -> MidTurnAction:
        return MidTurnAction.ENQUEUE

    def stop_timers(self) -> None:
        return None

    def begin_item(self) -> None:
        self.stop.clear()

    async def wait_finished(self) -> None:
        return None

    async def settle_checkpoints(self) -> None:
        return None

    def request_stop(self, reason: str) -> None:
        self.log.append(f"stop:{reason}")
        self.stop.set()

    async def stop_running_turn(self) -> None:
        self.request_stop("deleted")

    def unload(self, *, keep_tail: bool = False) -> None:
        self.log.append("unload")

    def unload_before_next_item(self) -> None:
        self.log.append("unload-later")

    async def handle(self, staged: Any, inbound: Any) -> None:
        self.running += 1
        self.log.append(f"message:{staged}")
        try:
            if self.obey_stop:
                await self.stop.wait()
            await self.wind_down.wait()
        finally:
            self.running -= 1

    async def release(self) -> None:
        return None


class Staged:
    session_id = "s"

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


INBOUND = type("In", (), {"platform": "cli", "id": "x"})()


@pytest.mark.rule("SM-21")
async def test_deletion_waits_for_the_running_item_and_no_item_starts_until_the_clear_is_done() -> None:
    runner = StoppableRunner()
    registry = ActorRegistry(lambda sid: runner, idle_s=5.0)  # type: ignore[arg-type,return-value]
    await registry.deliver(Staged("m1"), INBOUND)  # type: ignore[arg-type]
    await wait_for(lambda: runner.running == 1, what="m1 running")
    await registry.deliver(Staged("m2"), INBOUND)  # type: ignore[arg-type]
    inside, leave = asyncio.Event(), asyncio.Event()
    result: list[bool] = []

    async def delete() -> None:
        async with registry.stopped("s") as stopped:
            result.append(stopped)
            inside.set()
            await leave.wait()  # the clear

    deletion = asyncio.create_task(delete())
    await wait_for(lambda: "stop:deleted" in runner.log, what="the stop request")
    assert not inside.is_set()  # m1 has been asked to stop, but has not ended yet
    runner.wind_down.set()
    await wait_for(inside.is_set, what="the clear to begin")
    assert result == [True] and runner.running == 0 and runner.log[-1] == "unload"
    actor = registry.get("s")
    assert actor is not None
    await wait_for(actor.mailbox.empty, what="the actor to take m2")
    assert "message:m2" not in runner.log and not actor.busy  # held while the clear runs
    leave.set()
    await deletion
    await wait_for(lambda: "message:m2" in runner.log, what="m2 after the clear")


async def test_a_session_deleting_itself_from_its_own_item_does_not_wait_for_itself() -> None:
    runner = StoppableRunner()
    registry = ActorRegistry(lambda sid: runner, idle_s=5.0, stop_wait_s=3600.0)  # type: ignore[arg-type,return-value]

    async def delete_self(r: Any, reply: Any) -> bool:
        async with registry.stopped("s") as stopped:
            return stopped

    # A deadlock would hang here; the deletion goes on without waiting instead.
    assert await asyncio.wait_for(registry.call("s", "delete", delete_self), 10.0) is False
    assert runner.log[-1] == "unload-later"


async def test_an_item_that_does_not_stop_is_cleared_around_after_the_wait() -> None:
    runner = StoppableRunner(obey_stop=False)
    registry = ActorRegistry(lambda sid: runner, idle_s=5.0, stop_wait_s=0.05)  # type: ignore[arg-type,return-value]
    await registry.deliver(Staged("m1"), INBOUND)  # type: ignore[arg-type]
    await wait_for(lambda: runner.running == 1, what="m1 running")
    async with registry.stopped("s") as stopped:
        assert stopped is False and runner.running == 1
        assert runner.log[-1] == "unload-later"  # forgotten once m1 is over, not under its feet
    runner.wind_down.set()
    await registry.join(timeout_s=10)


async def test_a_session_without_an_actor_is_held_too() -> None:
    runner = StoppableRunner()
    registry = ActorRegistry(lambda sid: runner, idle_s=5.0)  # type: ignore[arg-type,return-value]
    ran: list[str] = []

    async def command(r: Any, reply: Any) -> str:
        ran.append("command")
        return "done"

    async with registry.stopped("s") as stopped:
        assert stopped is True
        pending = asyncio.ensure_future(registry.call("s", "after", command))
        actor = await wait_for(lambda: registry.get("s"), what="an actor created for the command")
        await wait_for(actor.mailbox.empty, what="the new actor to take the command")
        assert ran == [] and not pending.done()
    assert await pending == "done" and ran == ["command"]
