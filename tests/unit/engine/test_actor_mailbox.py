"""The session actor's mailbox: commands run inside the actor, before queued messages, one at a time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from consumers.actors import ActorRegistry
from core.engine.policy import MidTurnAction
from core.errors import Conflict
from tests.loop_counts import TimerCount
from tests.waiting import wait_for


class RecordingRunner:
    """Stands in for TurnRunner: records what the actor made it do."""

    def __init__(self, gate: asyncio.Event) -> None:
        self.gate = gate
        self.log: list[str] = []
        self.running = 0
        self.max_running = 0
        self.settled = 0  # checkpoint acks awaited after every item: nothing unacknowledged between items

    def notice_arrival(self, inbound: Any, *, busy: bool) -> MidTurnAction:
        return MidTurnAction.ENQUEUE

    def begin_item(self) -> None:
        return None

    async def wait_finished(self) -> None:
        return None

    def can_unload(self) -> bool:
        return True

    def stop_timers(self) -> None:
        return None

    def unload(self, *, keep_tail: bool = False) -> None:
        self.log.append("unload")

    async def settle_checkpoints(self) -> None:
        self.settled += 1

    def request_stop(self, reason: str) -> None:
        self.log.append(f"stop:{reason}")

    async def handle(self, staged: Any, inbound: Any) -> None:
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.log.append(f"message:{staged}")
        await self.gate.wait()
        self.running -= 1

    async def release(self) -> None:
        return None


class OfS:
    """A staged message of session ``s``, named for the log."""

    session_id = "s"

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


async def test_a_command_waits_for_the_running_item_then_goes_before_queued_messages() -> None:
    gate = asyncio.Event()
    runner = RecordingRunner(gate)
    registry = ActorRegistry(lambda sid: runner, idle_s=5.0)  # type: ignore[arg-type,return-value]
    inbound = type("In", (), {"platform": "cli", "id": "x"})()

    await registry.deliver(OfS("m1"), inbound)  # type: ignore[arg-type]
    await wait_for(lambda: runner.running, timeout_s=5, interval_s=0, what="the actor to take m1")
    await registry.deliver(OfS("m2"), inbound)  # type: ignore[arg-type]

    async def command(r: Any, reply: Any) -> str:
        r.log.append("command")
        assert r.running == 0  # never overlaps a turn
        return "done"

    pending = asyncio.ensure_future(registry.call("s", "test", command))
    await asyncio.sleep(0)
    assert not pending.done()
    gate.set()
    assert await pending == "done"
    await registry.join(timeout_s=5)
    assert runner.log == ["message:m1", "command", "message:m2"]
    assert runner.settled >= 3
    assert runner.max_running == 1
    await registry.close()


async def test_a_command_can_reply_early_and_its_errors_reach_the_caller() -> None:
    registry = ActorRegistry(lambda sid: RecordingRunner(asyncio.Event()), idle_s=5.0)  # type: ignore[arg-type,return-value]
    finished = asyncio.Event()

    async def early(r: Any, reply: Any) -> str:
        reply({"status": "started"})
        await asyncio.sleep(0)
        finished.set()
        return "ignored"

    assert await registry.call("s", "early", early) == {"status": "started"}
    await asyncio.wait_for(finished.wait(), 5)

    async def failing(r: Any, reply: Any) -> None:
        raise Conflict("nope")

    with pytest.raises(Conflict):
        await registry.call("s", "failing", failing)
    await registry.close()


async def test_past_the_loaded_cap_the_least_recently_used_idle_actor_is_evicted() -> None:
    runners: dict[str, RecordingRunner] = {}

    def make(sid: str) -> RecordingRunner:
        runners[sid] = RecordingRunner(asyncio.Event())
        return runners[sid]

    registry = ActorRegistry(make, idle_s=3600.0, max_loaded=2)  # type: ignore[arg-type]
    inbound = type("In", (), {"platform": "cli", "id": "x"})()

    class Staged:
        def __init__(self, sid: str) -> None:
            self.session_id = sid

        def __repr__(self) -> str:
            return self.session_id

    await registry.deliver(Staged("a"), inbound)  # type: ignore[arg-type]
    await wait_for(lambda: runners["a"].running, timeout_s=5, interval_s=0, what="a busy")
    runners["a"].gate.set()
    await registry.join(timeout_s=5)
    await registry.deliver(Staged("b"), inbound)  # type: ignore[arg-type]
    await wait_for(lambda: runners["b"].running, timeout_s=5, interval_s=0, what="b busy")  # b stays busy
    await registry.deliver(Staged("a"), inbound)  # type: ignore[arg-type]  # a used again: b is now the oldest
    await wait_for(lambda: runners["a"].log.count("message:a") == 2 and not runners["a"].running, timeout_s=5, interval_s=0,
                   what="a's second message")
    await registry.deliver(Staged("c"), inbound)  # type: ignore[arg-type]
    # b is busy, so it is kept although it is the least recently used; a (idle) goes.
    await wait_for(lambda: registry.get("a") is None, timeout_s=5, interval_s=0, what="a to be evicted")
    assert registry.get("b") is not None and registry.get("c") is not None
    runners["b"].gate.set()
    runners["c"].gate.set()
    await registry.join(timeout_s=5)
    assert runners["a"].log[-1] == "unload"  # evicted: its loaded state is forgotten
    assert runners["b"].log == ["message:b"]  # b was never evicted mid-message
    await registry.close()


async def test_after_a_burst_over_many_sessions_no_more_than_the_cap_stay_loaded() -> None:
    gate = asyncio.Event()
    registry = ActorRegistry(lambda sid: RecordingRunner(gate), idle_s=3600.0, max_loaded=3)  # type: ignore[arg-type,return-value]
    inbound = type("In", (), {"platform": "cli", "id": "x"})()

    class Staged:
        def __init__(self, sid: str) -> None:
            self.session_id = sid

    for i in range(20):  # every actor has work queued: none can be evicted while it waits for it
        await registry.deliver(Staged(f"s{i}"), inbound)  # type: ignore[arg-type]
    assert len(registry) == 20
    gate.set()
    await registry.join(timeout_s=5)
    await wait_for(lambda: len(registry) <= 3, timeout_s=5, interval_s=0, what="the actors past the cap to end")
    await registry.close()


async def test_an_actor_past_the_cap_whose_reply_lands_after_its_item_retires_without_new_work() -> None:
    gate = asyncio.Event()
    landed = False  # its reply's broker ack: until then the runner cannot be unloaded

    class LandingRunner(RecordingRunner):
        def can_unload(self) -> bool:
            return landed

    registry = ActorRegistry(lambda sid: LandingRunner(gate), idle_s=3600.0, max_loaded=3,  # type: ignore[arg-type,return-value]
                             retire_retry_s=0.01)
    inbound = type("In", (), {"platform": "cli", "id": "x"})()

    class Staged:
        def __init__(self, sid: str) -> None:
            self.session_id = sid

    for i in range(20):
        await registry.deliver(Staged(f"s{i}"), inbound)  # type: ignore[arg-type]
    gate.set()
    await registry.join(timeout_s=5)
    assert len(registry) == 20  # every item is done but nothing has landed: none may go yet
    landed = True  # no new message arrives: the idle actors past the cap end by themselves
    await wait_for(lambda: len(registry) <= 3, timeout_s=5, interval_s=0, what="the actors past the cap to end")
    await registry.close()


async def test_actors_that_finish_together_past_the_cap_retire_down_to_the_cap_not_below() -> None:
    gate = asyncio.Event()
    landing = asyncio.Event()  # the items' publishes land together, after every actor asked to retire

    waiting: list[str] = []

    class SlowLandingRunner(RecordingRunner):
        async def wait_finished(self) -> None:
            waiting.append("landing")
            await landing.wait()

    registry = ActorRegistry(lambda sid: SlowLandingRunner(gate), idle_s=3600.0, max_loaded=3)  # type: ignore[arg-type,return-value]
    inbound = type("In", (), {"platform": "cli", "id": "x"})()

    class Staged:
        def __init__(self, sid: str) -> None:
            self.session_id = sid

    for i in range(20):
        await registry.deliver(Staged(f"s{i}"), inbound)  # type: ignore[arg-type]
    gate.set()
    await wait_for(lambda: len(waiting) == 20, timeout_s=5, interval_s=0, what="every actor past the cap to wait for its item to land")
    landing.set()
    await wait_for(lambda: len(registry) <= 3, timeout_s=5, interval_s=0, what="the actors past the cap to end")
    await registry.join(timeout_s=5)
    assert len(registry) == 3  # the loaded sessions the cap allows stay loaded
    await registry.close()


async def test_an_idle_actor_whose_last_reply_has_not_landed_stays_loaded_until_it_has() -> None:
    """The idle exit (``TURNSTILE_ACTOR_IDLE_S``) asks the runner like the cap does: a runner still holding
    an unconfirmed reply (its reply-order record) or a landing item is not unloaded by going idle."""
    gate = asyncio.Event()
    gate.set()
    landed = False
    asked: list[bool] = []

    class LandingRunner(RecordingRunner):
        def can_unload(self) -> bool:
            asked.append(landed)
            return landed

    registry = ActorRegistry(lambda sid: LandingRunner(gate), idle_s=0.01)  # type: ignore[arg-type,return-value]
    inbound = type("In", (), {"platform": "cli", "id": "x"})()

    class Staged:
        session_id = "s1"

    await registry.deliver(Staged(), inbound)  # type: ignore[arg-type]
    await registry.join(timeout_s=5)
    await wait_for(lambda: len(asked) >= 3, timeout_s=5, interval_s=0, what="the idle actor to ask its runner again")
    assert len(registry) == 1  # idle several times over, but its reply has not landed: still loaded
    landed = True
    await wait_for(lambda: len(registry) == 0, timeout_s=5, interval_s=0, what="the idle actor to end once it has landed")
    await registry.close()


def _waiting(registry: ActorRegistry) -> bool:
    actor = registry.get("s")
    return actor is not None and actor.waiting


async def test_an_actor_that_waits_for_each_message_arms_no_timer_per_message() -> None:
    # Paced traffic: every message finds its actor waiting on an empty mailbox. The idle deadline
    # is kept as one timer that re-arms itself, not a timeout armed and cancelled for each wait.
    gate = asyncio.Event()
    gate.set()
    runner = RecordingRunner(gate)
    registry = ActorRegistry(lambda sid: runner, idle_s=3600.0)  # type: ignore[arg-type,return-value]
    inbound = type("In", (), {"platform": "cli", "id": "x"})()

    with TimerCount() as timers:
        for i in range(30):
            await registry.deliver(OfS(f"m{i}"), inbound)  # type: ignore[arg-type]
            await wait_for(lambda n=i + 1: len(runner.log) == n and _waiting(registry), timeout_s=5,
                           interval_s=0, what="the actor to serve it and wait again")
    assert runner.log == [f"message:m{i}" for i in range(30)]
    assert timers.armed <= 3, timers.armed
    await registry.close()


async def test_a_mailbox_join_waits_for_every_item_and_a_joiner_giving_up_leaves_the_others() -> None:
    from consumers.actors import Mailbox, Work

    box = Mailbox()
    await asyncio.wait_for(box.join(), 1)  # nothing put: returns at once
    box.put(Work("one", "in"))  # type: ignore[arg-type]
    box.put(Work("two", "in"))  # type: ignore[arg-type]
    first = asyncio.create_task(box.join())
    second = asyncio.create_task(box.join())
    await asyncio.sleep(0)
    first.cancel()
    box.get_nowait()
    box.task_done()
    await asyncio.sleep(0)
    assert not second.done()
    box.get_nowait()
    box.task_done()
    await asyncio.wait_for(second, 1)
    assert first.cancelled()
