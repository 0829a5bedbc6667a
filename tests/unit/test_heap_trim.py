"""Giving the C heap's free pages back after a batch of unloaded sessions (consumers/heap_trim.py)."""

from __future__ import annotations

import asyncio
import platform
from typing import Any

from consumers.actors import ActorRegistry
from consumers.heap_trim import HeapTrim, _glibc_malloc_trim
from tests.unit.engine.test_actor_mailbox import RecordingRunner
from tests.waiting import wait_for


class CountedTrim:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, pad: int) -> int:
        self.calls.append(pad)
        return 1


def test_one_trim_per_batch_of_unloaded_sessions() -> None:
    trim = CountedTrim()
    heap = HeapTrim(every=3, trim=trim)
    for _ in range(7):
        heap.unloaded()
    assert trim.calls == [0, 0]
    assert heap.trims == 2


def test_malloc_trim_is_found_only_on_glibc() -> None:
    found = _glibc_malloc_trim()
    if platform.libc_ver()[0] == "glibc":
        assert found is not None and found(0) in (0, 1)
    else:
        assert found is None


async def test_the_registry_counts_each_evicted_session() -> None:
    trim = CountedTrim()
    gate = asyncio.Event()
    gate.set()
    registry = ActorRegistry(
        lambda sid: RecordingRunner(gate), idle_s=3600.0, max_loaded=1,  # type: ignore[arg-type,return-value]
        heap_trim=HeapTrim(every=2, trim=trim),
    )
    inbound: Any = type("In", (), {"platform": "cli", "id": "x"})()

    class Staged:
        def __init__(self, sid: str) -> None:
            self.session_id = sid

    for sid in ("a", "b", "c"):  # past the cap of 1: "a", then "b" are evicted
        await registry.deliver(Staged(sid), inbound)  # type: ignore[arg-type]
        await registry.join(timeout_s=5)
    await wait_for(lambda: trim.calls == [0], timeout_s=5, interval_s=0, what="one trim after two evictions")
    await registry.close()
