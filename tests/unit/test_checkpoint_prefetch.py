"""consumers/checkpoint_prefetch.py, and when the actor registry starts and drops a prefetch."""

from __future__ import annotations

import asyncio

import pytest

from consumers.actors import ActorRegistry
from consumers.checkpoint_prefetch import CheckpointPrefetch, CheckpointRead, read_checkpoint
from tests.unit.engine.test_actor_holds import INBOUND, StoppableRunner


class Store:
    """The last checkpoint of each session, as the stream would answer; counts the reads."""

    def __init__(self) -> None:
        self.last: dict[str, CheckpointRead] = {}
        self.reads: list[str] = []
        self.fail = False

    async def read(self, session_id: str) -> CheckpointRead:
        self.reads.append(session_id)
        await asyncio.sleep(0)
        if self.fail:
            raise ConnectionError("no answer")
        return self.last.get(session_id)


async def test_a_taken_prefetch_answers_what_was_stored_when_it_started_and_is_taken_once() -> None:
    store = Store()
    store.last["s"] = (7, b"snapshot")
    prefetch = CheckpointPrefetch(store.read)
    prefetch.start("s")
    prefetch.start("s")  # one read per session at a time
    taken = prefetch.take("s")
    assert taken is not None
    assert await read_checkpoint(taken, lambda: store.read("s")) == (7, b"snapshot")
    assert store.reads == ["s"]
    assert prefetch.take("s") is None  # taken: the next restore reads for itself


async def test_a_prefetch_past_its_age_is_not_used() -> None:
    store = Store()
    prefetch = CheckpointPrefetch(store.read, max_age_s=-1.0)  # every prefetch is past it at once
    prefetch.start("s")
    assert prefetch.take("s") is None
    assert len(prefetch) == 0


async def test_only_max_kept_prefetches_are_kept_and_lapsed_ones_make_room() -> None:
    store = Store()
    prefetch = CheckpointPrefetch(store.read, max_kept=2)
    for sid in ("a", "b", "c"):
        prefetch.start(sid)
    assert len(prefetch) == 2
    assert prefetch.take("c") is None
    lapsing = CheckpointPrefetch(store.read, max_kept=1, max_age_s=-1.0)
    lapsing.start("a")
    lapsing.start("b")  # "a" lapsed: it makes room
    assert len(lapsing) == 1
    assert lapsing.take("a") is None


async def test_a_failed_prefetch_is_read_again_by_the_restore() -> None:
    store = Store()
    store.fail = True
    prefetch = CheckpointPrefetch(store.read)
    prefetch.start("s")
    taken = prefetch.take("s")
    assert taken is not None
    await asyncio.wait([taken])
    store.fail = False
    store.last["s"] = (3, b"x")
    assert await read_checkpoint(taken, lambda: store.read("s")) == (3, b"x")
    assert store.reads == ["s", "s"]


async def test_a_discarded_prefetch_is_cancelled() -> None:
    store = Store()
    prefetch = CheckpointPrefetch(store.read)
    prefetch.start("s")
    kept = prefetch._kept["s"].read
    prefetch.discard("s")
    await asyncio.wait([kept])
    assert kept.cancelled()
    assert prefetch.take("s") is None


def _registry(prefetch: CheckpointPrefetch, runner: StoppableRunner) -> ActorRegistry:
    return ActorRegistry(lambda sid: runner, idle_s=60.0, stop_wait_s=1.0, prefetch=prefetch)  # type: ignore[arg-type, return-value]


async def test_the_registry_prefetches_only_for_a_session_without_an_actor() -> None:
    store = Store()
    prefetch = CheckpointPrefetch(store.read)
    runner = StoppableRunner()
    actors = _registry(prefetch, runner)
    await actors.deliver(type("S", (), {"session_id": "busy"})(), INBOUND)  # type: ignore[arg-type]
    actors.prefetch("busy")  # its engine is (being) loaded: its checkpoints may change under a read
    actors.prefetch("cold")
    assert prefetch.take("busy") is None
    assert prefetch.take("cold") is not None
    runner.stop.set()
    runner.wind_down.set()
    await actors.close()


@pytest.mark.rule("SM-21")
async def test_a_held_session_starts_no_prefetch_and_one_from_before_the_hold_is_dropped() -> None:
    # A deletion purges the session's checkpoints while it is held: a read from before the purge
    # must not restore the next message of the new generation.
    store = Store()
    store.last["s"] = (9, b"old generation")
    prefetch = CheckpointPrefetch(store.read)
    actors = _registry(prefetch, StoppableRunner())
    actors.prefetch("s")
    async with actors.stopped("s"):
        assert prefetch.take("s") is None  # dropped when the hold began
        actors.prefetch("s")
        assert len(prefetch) == 0  # none starts while held
        del store.last["s"]  # the purge
    actors.prefetch("s")  # after the hold: a fresh read
    taken = prefetch.take("s")
    assert taken is not None
    assert await read_checkpoint(taken, lambda: store.read("s")) is None
    await actors.close()
