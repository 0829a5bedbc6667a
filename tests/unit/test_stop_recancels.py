"""Stops that cancel a task must end it even when that task loses the cancel.

On Python 3.11 a cancel can be lost below our code: ``asyncio.wait_for`` returns the awaited result
instead of raising when cancelled just after that result came in (gh-86296), and nats-py's requests
and asyncpg's queries wait that way. A stop that cancelled once and then awaited the task for ever
hung on such a task (``consumers/task_stop.py``). The fakes here lose their first cancel outright:
the effect of that race, without having to time it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from consumers.actors import ActorRegistry
from consumers.cli import _serve_term
from consumers.health import ServiceHealth
from consumers.inbound_pipeline import InboundPipeline
from consumers.service import TurnstileService
from consumers.task_stop import cancel_and_wait
from core.store.inbox import StagedMessage
from schemas.wire import InboundMessage
from tests.unit.engine.test_actor_mailbox import RecordingRunner
from tests.waiting import wait_for

ENDS_WITHIN_S = 5.0


class LosesOneCancel:
    """Waits for ever; the first cancel is lost (the wait goes on), the second one ends it."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        self.lost = 0

    async def wait(self) -> None:
        self.waiting.set()
        while True:
            try:
                await asyncio.get_running_loop().create_future()
            except asyncio.CancelledError:
                if self.lost:
                    raise
                self.lost += 1


async def _ends(stop: asyncio.Task[Any], *stuck: asyncio.Task[Any] | None) -> None:
    """``stop`` ends in time; ``stuck`` are cancelled for good afterwards whatever happened."""
    try:
        await asyncio.wait([stop], timeout=ENDS_WITHIN_S)
        assert stop.done(), "the stop hung on a task that lost its cancel"
        stop.result()
    finally:
        for task in stuck:
            if task is not None:
                await cancel_and_wait(task)
        await cancel_and_wait(stop)


# -- the inbound pipeline's stager --------------------------------------------------------


class _Recorder:
    async def record_inbound(self, message: InboundMessage) -> None:
        return None

    def generation_of(self, session_id: str) -> int:
        return 0


class _Msg:
    data = b"{}"

    async def ack(self) -> None:
        return None

    async def nak(self, delay: float | None = None) -> None:
        return None

    async def in_progress(self) -> None:
        return None


class _StagesAfterALostCancel:
    def __init__(self) -> None:
        self.store = LosesOneCancel()

    async def stage(self, staged: list[StagedMessage]) -> list[bool]:
        await self.store.wait()  # its second cancel is the stager's: by then it waits for new work
        return [True] * len(staged)


async def _handoff(staged: StagedMessage, inbound: InboundMessage) -> None:
    return None


async def test_closing_the_inbound_pipeline_ends_a_stager_that_lost_its_cancel() -> None:
    inbox = _StagesAfterALostCancel()
    pipeline = InboundPipeline(
        _Recorder(), inbox, _handoff, ServiceHealth(None), max_in_flight=8, heartbeat_s=3600  # type: ignore[arg-type]
    )
    pipeline.start()
    inbound = InboundMessage.model_validate({"id": "m1", "platform": "cli", "session_id": "s", "text": "hi"})
    pipeline.admit(_Msg(), inbound)  # type: ignore[arg-type]
    await asyncio.wait_for(inbox.store.waiting.wait(), ENDS_WITHIN_S)
    await _ends(asyncio.create_task(pipeline.close(drain_timeout_s=0)), *pipeline._tasks)
    assert inbox.store.lost == 1


# -- session actors ---------------------------------------------------------------------------


class _TurnLosesOneCancel(RecordingRunner):
    def __init__(self) -> None:
        super().__init__(asyncio.Event())
        self.turn = LosesOneCancel()

    async def handle(self, staged: Any, inbound: Any) -> None:
        self.running += 1
        await self.turn.wait()


class _Staged:
    session_id = "s"


async def _registry_with_a_running_turn() -> tuple[ActorRegistry, _TurnLosesOneCancel]:
    runner = _TurnLosesOneCancel()
    registry = ActorRegistry(lambda sid: runner, idle_s=3600.0)  # type: ignore[arg-type,return-value]
    inbound: Any = type("In", (), {"platform": "cli", "id": "x"})()
    await registry.deliver(_Staged(), inbound)  # type: ignore[arg-type]
    await asyncio.wait_for(runner.turn.waiting.wait(), ENDS_WITHIN_S)
    return registry, runner


async def test_closing_the_registry_ends_a_turn_that_lost_its_cancel() -> None:
    registry, runner = await _registry_with_a_running_turn()
    actor = registry.get("s")
    assert actor is not None
    await _ends(asyncio.create_task(registry.close(drain_timeout_s=0)), actor.task)
    assert runner.turn.lost == 1 and len(registry) == 0


async def test_releasing_moved_sessions_ends_a_turn_that_lost_its_cancel() -> None:
    registry, runner = await _registry_with_a_running_turn()
    actor = registry.get("s")
    assert actor is not None
    await _ends(asyncio.create_task(registry.release_sessions(lambda sid: True)), actor.task)
    assert runner.turn.lost == 1 and len(registry) == 0


# -- `turnstile run` stopped while it stands by ------------------------------------------------


class _StandbyLosesOneCancel(TurnstileService):
    """Stands by for the lease for ever, its first cancel lost (in a KV request, say)."""

    def __init__(self) -> None:  # nothing of the real service: only start and stop are used
        self.standby = LosesOneCancel()
        self.stopped = False

    async def start(self, patient: bool = False) -> None:
        await self.standby.wait()

    async def stop(self) -> None:
        self.stopped = True


async def test_a_standby_stopped_while_it_waits_for_the_lease_stops_although_it_lost_the_cancel() -> None:
    service = _StandbyLosesOneCancel()
    stop = asyncio.Event()
    term = asyncio.create_task(_serve_term(service, stop, False, logging.getLogger("test")))
    await wait_for(service.standby.waiting.is_set, what="the service to stand by")
    stop.set()  # SIGTERM
    await _ends(term)
    assert term.result() == "stopped" and service.stopped and service.standby.lost == 1


async def test_a_cli_command_stopped_by_a_signal_ends_even_when_its_work_loses_the_cancel() -> None:
    # ``until_stopped`` (``turnstile replay --follow``, ``tail``): SIGINT cancelled the work once and
    # awaited it; work that lost that cancel (nats-py waiting for a request) ignored Ctrl-C until killed.
    import os
    import signal

    from consumers.cli_support import until_stopped

    stuck = LosesOneCancel()
    command = asyncio.create_task(until_stopped(stuck.wait()))
    await wait_for(stuck.waiting.is_set, what="the command's work to run")  # its signal handlers are installed
    os.kill(os.getpid(), signal.SIGINT)
    await _ends(command)
    assert command.result() is None and stuck.lost == 1


async def test_the_inbound_loops_stop_ends_when_its_fetch_loop_loses_the_cancel_past_the_bound() -> None:
    # InboundLoop.stop waited for the fetch loop with ``wait_for``: past the bound (fetch timeout + 5 s) it
    # cancelled the loop once and then waited for it for ever, so a cancel lost in nats-py's fetch hung the
    # service's stop. Now past the bound it cancels again until the loop ends.
    from consumers.inbound_loop import InboundLoop
    from consumers.settings import Settings
    from schemas.subjects import Subjects

    async def handoff(*_: object) -> None:
        return None

    settings = Settings(fetch_timeout_s=0.1)
    loop = InboundLoop(None, settings, Subjects("t"), None, None, None, handoff)  # type: ignore[arg-type]
    stuck = LosesOneCancel()
    loop._task = asyncio.create_task(stuck.wait())
    await wait_for(stuck.waiting.is_set, what="the fetch loop to run")
    stop = asyncio.create_task(loop.stop(drain_timeout_s=0))
    try:
        await asyncio.wait([stop], timeout=settings.fetch_timeout_s + 5 + ENDS_WITHIN_S)
        assert stop.done(), "the stop hung on a fetch loop that lost its cancel"
        stop.result()
        assert stuck.lost == 1 and loop._task.cancelled()
    finally:
        await cancel_and_wait(loop._task)
        await cancel_and_wait(stop)
