"""A session whose ownership is in doubt: its actor serves nothing more of it until the session's
staged messages are replayed in staging order (here, or by the new owner)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from consumers.actors import ActorRegistry
from consumers.retry_policy import OwnershipLost
from core.engine.policy import MidTurnAction
from tests.waiting import wait_for


@dataclass(frozen=True)
class Staged:
    message_id: str
    session_id: str = "s"
    platform: str = "cli"

    @property
    def key(self) -> tuple[str, str]:
        return (self.platform, self.message_id)


class Inbound:
    platform = "cli"

    def __init__(self, message_id: str) -> None:
        self.id = message_id


class LocalLease:
    """Stands in for the partition's lease: ``owns`` is the local clock's verdict; ``reestablished``
    returns once the session is ours again, with its staged messages in staging order."""

    def __init__(self, staged: list[str]) -> None:
        self.ours = True
        self.staged = staged  # the inbox's staged, unfinished rows of the session
        self.back = asyncio.Event()
        self.waiting = 0

    def owns(self, session_id: str) -> bool:
        return self.ours

    async def reestablished(self, session_id: str) -> list[tuple[Any, Any]]:
        self.waiting += 1
        await self.back.wait()
        return [(Staged(m), Inbound(m)) for m in self.staged]


class Runner:
    """Stands in for TurnRunner; ``m1``'s first run waits at ``gate``, then acts as told."""

    def __init__(self, gate: asyncio.Event, lease: LocalLease, first_m1: str) -> None:
        self.gate = gate
        self.lease = lease
        self.first_m1 = first_m1  # "abandon": gives m1 up as owned elsewhere; "lose": KV names another owner
        self.served: list[str] = []
        self.running = False

    def notice_arrival(self, inbound: Any, *, busy: bool) -> MidTurnAction:
        return MidTurnAction.ENQUEUE

    def stop_timers(self) -> None:
        return None

    def begin_item(self) -> None:
        return None

    async def settle_checkpoints(self) -> None:
        return None

    async def wait_finished(self) -> None:
        return None

    def unload(self, *, keep_tail: bool = False) -> None:
        return None

    async def release(self) -> None:
        return None

    async def handle(self, staged: Staged, inbound: Any) -> None:
        first = staged.message_id == "m1" and "m1" not in self.served and not self.running
        self.served.append(staged.message_id)
        if not first:
            self.lease.staged.remove(staged.message_id)  # finished: no longer staged
            return
        self.running = True
        await self.gate.wait()
        self.running = False
        if self.first_m1 == "lose":
            raise OwnershipLost("another process owns the session now")
        # "abandon": the local lease lapsed while m1 ran; the runner gave m1 up (it stays staged)
        # and returned, as TurnRunner.handle did before it raised OwnershipLost.
        self.lease.ours = False


async def _two_queued(first_m1: str) -> tuple[ActorRegistry, Runner, LocalLease, asyncio.Event]:
    gate = asyncio.Event()
    lease = LocalLease(["m1", "m2"])
    runner = Runner(gate, lease, first_m1)
    registry = ActorRegistry(lambda sid: runner, idle_s=5.0)  # type: ignore[arg-type,return-value]
    registry.fence = lease
    await registry.deliver(Staged("m1"), Inbound("m1"))  # type: ignore[arg-type]
    await wait_for(lambda: runner.running, timeout_s=5, interval_s=0, what="the actor to take m1")
    await registry.deliver(Staged("m2"), Inbound("m2"))  # type: ignore[arg-type]
    return registry, runner, lease, gate


async def test_a_lease_that_lapses_while_a_message_runs_stops_the_session_until_its_staged_messages_replay() -> None:
    registry, runner, lease, gate = await _two_queued("abandon")
    gate.set()
    await wait_for(lambda: lease.waiting, timeout_s=5, interval_s=0, what="the actor to wait for its lease")
    await registry.deliver(Staged("m3"), Inbound("m3"))  # type: ignore[arg-type]  # arrives meanwhile
    lease.staged.append("m3")
    for _ in range(20):
        await asyncio.sleep(0)  # let the actor run if it wrongly would
    assert runner.served == ["m1"]  # m2 is not served after m1 was given up
    lease.ours = True
    lease.back.set()
    await registry.join(timeout_s=5)
    assert runner.served == ["m1", "m1", "m2", "m3"]  # replayed in staging order, each once
    assert lease.staged == []


async def test_a_message_given_up_because_another_process_owns_the_session_stops_the_session_here() -> None:
    registry, runner, lease, gate = await _two_queued("lose")  # the local lease still says ours
    gate.set()
    await wait_for(lambda: lease.waiting, timeout_s=5, interval_s=0, what="the actor to wait for its lease")
    assert runner.served == ["m1"]
    # The partition moves: the hand-over stops the actor; the new owner replays m1, m2.
    assert await registry.release_sessions(lambda sid: True) == 1
    assert runner.served == ["m1"]
    assert len(registry) == 0


async def test_an_actor_whose_lease_lapsed_between_messages_takes_no_next_message() -> None:
    gate = asyncio.Event()
    gate.set()
    lease = LocalLease(["m2"])
    runner = Runner(gate, lease, "abandon")
    runner.served.append("m1")  # m1 finished earlier
    registry = ActorRegistry(lambda sid: runner, idle_s=5.0)  # type: ignore[arg-type,return-value]
    registry.fence = lease
    lease.ours = False  # lapsed locally (renewals stalled)
    await registry.deliver(Staged("m2"), Inbound("m2"))  # type: ignore[arg-type]
    await wait_for(lambda: lease.waiting, timeout_s=5, interval_s=0, what="the actor to wait for its lease")
    assert runner.served == ["m1"]
    lease.ours = True
    lease.back.set()
    await registry.join(timeout_s=5)
    assert runner.served == ["m1", "m2"]


async def test_a_command_routed_here_is_not_held_by_a_lapsed_lease() -> None:
    gate = asyncio.Event()
    lease = LocalLease([])
    runner = Runner(gate, lease, "abandon")
    registry = ActorRegistry(lambda sid: runner, idle_s=5.0)  # type: ignore[arg-type,return-value]
    registry.fence = lease
    lease.ours = False  # no message of the session is served, but the control router chose this process

    async def command(r: Any, reply: Any) -> str:
        return "done"

    assert await asyncio.wait_for(registry.call("s", "test", command), 5) == "done"
    assert lease.waiting == 0
