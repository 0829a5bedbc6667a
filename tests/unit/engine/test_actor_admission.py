"""The admission bound: at most ``max_with_work`` sessions hold inbound work; idle loaded ones do not count."""

from __future__ import annotations

import asyncio
from typing import Any

from consumers.actors import ActorRegistry
from core.engine.policy import MidTurnAction
from tests.waiting import wait_for

INBOUND = type("In", (), {"platform": "cli", "id": "x"})()


class Staged:
    def __init__(self, sid: str) -> None:
        self.session_id = sid

    def __repr__(self) -> str:
        return self.session_id


class GatedRunner:
    """Stands in for TurnRunner: each message waits for its session's gate."""

    def __init__(self, gate: asyncio.Event) -> None:
        self.gate = gate
        self.handled: list[str] = []
        self.running = 0

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
        return None

    async def settle_checkpoints(self) -> None:
        return None

    def request_stop(self, reason: str) -> None:
        return None

    async def handle(self, staged: Any, inbound: Any) -> None:
        self.running += 1
        await self.gate.wait()
        self.running -= 1
        self.handled.append(repr(staged))

    async def release(self) -> None:
        return None


def gated_registry(max_with_work: int, **kw: Any) -> tuple[ActorRegistry, dict[str, GatedRunner], dict[str, asyncio.Event]]:
    gates: dict[str, asyncio.Event] = {}
    runners: dict[str, GatedRunner] = {}

    def make(sid: str) -> GatedRunner:
        runners[sid] = GatedRunner(gates.setdefault(sid, asyncio.Event()))
        return runners[sid]

    registry = ActorRegistry(make, idle_s=3600.0, max_with_work=max_with_work, **kw)  # type: ignore[arg-type]
    return registry, runners, gates


async def test_a_message_for_a_new_session_waits_while_the_bound_of_sessions_with_work_is_reached() -> None:
    registry, runners, gates = gated_registry(2)
    registry.admission.max_wait_s = 3600.0
    await registry.deliver_when_room(Staged("a"), INBOUND)  # type: ignore[arg-type]
    await registry.deliver_when_room(Staged("b"), INBOUND)  # type: ignore[arg-type]
    await wait_for(lambda: runners["a"].running and runners["b"].running, timeout_s=5, interval_s=0, what="a and b busy")
    third = asyncio.ensure_future(registry.deliver_when_room(Staged("c"), INBOUND))  # type: ignore[arg-type]
    for _ in range(20):
        await asyncio.sleep(0)
    assert not third.done() and registry.get("c") is None  # held back: no actor, nothing loaded
    # A session that already has work is never held back (its messages only queue behind its own).
    await asyncio.wait_for(registry.deliver_when_room(Staged("a"), INBOUND), 5)  # type: ignore[arg-type]
    assert not third.done()
    gates["b"].set()  # b's work ends: room for c
    await asyncio.wait_for(third, 5)
    await wait_for(lambda: runners["c"].running, timeout_s=5, interval_s=0, what="c to be served")
    assert len(registry.admission) <= 2
    gates["a"].set()
    gates["c"].set()
    await registry.join(timeout_s=5)
    assert runners["a"].handled == ["a", "a"] and runners["b"].handled == ["b"] and runners["c"].handled == ["c"]
    assert len(registry.admission) == 0 and registry.admission.waited_out == 0
    await registry.close()


async def test_idle_loaded_sessions_do_not_count_against_the_bound() -> None:
    # A bound on all loaded actors stalls a drain: idle ones at the cap never retire without new work.
    registry, _runners, gates = gated_registry(2, max_loaded=100)
    registry.admission.max_wait_s = 3600.0
    for i in range(10):
        gates.setdefault(f"s{i}", asyncio.Event()).set()
        await asyncio.wait_for(registry.deliver_when_room(Staged(f"s{i}"), INBOUND), 5)  # type: ignore[arg-type]
        await registry.join(timeout_s=5)
    assert len(registry) == 10  # all loaded and idle
    assert len(registry.admission) == 0 and registry.admission.waited_out == 0
    await registry.close()


async def test_a_backlog_over_many_sessions_drains_with_never_more_than_the_bound_holding_work() -> None:
    registry, _runners, gates = gated_registry(3, max_loaded=4)
    registry.admission.max_wait_s = 3600.0
    most = 0
    served: list[str] = []
    real_make = registry._make_runner

    def make(sid: str) -> Any:  # an evicted session comes back with a new runner: count across them
        runner = real_make(sid)
        runner.handled = served
        return runner

    registry._make_runner = make

    async def stager() -> None:  # the pipeline's hand-off: one message after another, in order
        nonlocal most
        for i in range(60):
            gates.setdefault(f"s{i % 30}", asyncio.Event()).set()
            await registry.deliver_when_room(Staged(f"s{i % 30}"), INBOUND)  # type: ignore[arg-type]
            most = max(most, len(registry.admission))

    await asyncio.wait_for(stager(), 10)
    await registry.join(timeout_s=10)
    assert sorted(served) == sorted(f"s{i % 30}" for i in range(60))
    assert most <= 3
    await wait_for(lambda: len(registry) <= 4, timeout_s=5, interval_s=0, what="the actors past the cap to end")
    await registry.close()


async def test_the_wait_for_room_is_bounded_so_work_that_never_ends_cannot_keep_new_sessions_out() -> None:
    registry, runners, gates = gated_registry(1)
    registry.admission.max_wait_s = 0.01
    await registry.deliver_when_room(Staged("stuck"), INBOUND)  # type: ignore[arg-type]
    await wait_for(lambda: runners["stuck"].running, timeout_s=5, interval_s=0, what="stuck busy")
    await asyncio.wait_for(registry.deliver_when_room(Staged("next"), INBOUND), 5)  # type: ignore[arg-type]
    assert registry.admission.waited_out == 1 and registry.get("next") is not None
    gates["stuck"].set()
    gates["next"].set()
    await registry.join(timeout_s=5)
    await registry.close()


async def test_a_command_counts_as_work_but_never_waits() -> None:
    registry, runners, gates = gated_registry(1)
    registry.admission.max_wait_s = 3600.0
    await registry.deliver_when_room(Staged("a"), INBOUND)  # type: ignore[arg-type]
    await wait_for(lambda: runners["a"].running, timeout_s=5, interval_s=0, what="a busy")

    async def command(r: Any, reply: Any) -> str:
        return "done"

    assert await asyncio.wait_for(registry.call("b", "test", command), 5) == "done"
    gates["a"].set()
    await registry.join(timeout_s=5)
    await wait_for(lambda: len(registry.admission) == 0, timeout_s=5, interval_s=0, what="no session with work")
    await registry.close()
