"""An ended session actor and its runner are freed by reference counting, not left to the cyclic collector.

The served process collects older generations rarely (TURNSTILE_GC_THRESHOLD), so anything left in a
reference cycle stays until a full collection: every evicted session used to (issue 17, memory).
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from consumers.actors import ActorRegistry
from consumers.turn_runner import TurnRunner
from tests.unit.engine.test_actor_mailbox import RecordingRunner
from tests.waiting import wait_for


@pytest.fixture
def no_cyclic_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Anything:
    """A stand-in port: every attribute is a do-nothing callable."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def test_a_turn_runner_is_not_a_reference_cycle(no_cyclic_collector: None) -> None:
    runner = TurnRunner(
        "s", engines=Anything(), book=Anything(), publisher=Anything(), inbox=Anything(),  # type: ignore[arg-type]
        turn_slots=asyncio.Semaphore(1),
    )
    gone = weakref.ref(runner)
    del runner
    assert gone() is None


async def test_an_evicted_actor_is_freed_when_it_ends(no_cyclic_collector: None) -> None:
    gate = asyncio.Event()
    gate.set()
    registry = ActorRegistry(lambda sid: RecordingRunner(gate), idle_s=3600.0, max_loaded=1)  # type: ignore[arg-type,return-value]
    inbound = type("In", (), {"platform": "cli", "id": "x"})()

    class Staged:
        def __init__(self, sid: str) -> None:
            self.session_id = sid

    await registry.deliver(Staged("first"), inbound)  # type: ignore[arg-type]
    await registry.join(timeout_s=5)
    actor = registry.get("first")
    assert actor is not None and actor.task is not None
    task = actor.task
    gone = weakref.ref(actor)
    del actor
    await registry.deliver(Staged("second"), inbound)  # type: ignore[arg-type]  # past the cap: "first" is evicted
    await wait_for(task.done, timeout_s=5, interval_s=0, what="the evicted actor to end")
    assert task.cancelled()
    del task  # the event loop keeps no finished task
    await wait_for(lambda: gone() is None, timeout_s=5, interval_s=0, what="the evicted actor to be freed")
    await registry.close()
