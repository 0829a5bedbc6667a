"""The served loop collects young garbage while it waits (TURNSTILE_GC_IDLE_THRESHOLD, consumers/idle_gc.py)."""

from __future__ import annotations

import asyncio
import gc
import selectors
from collections.abc import Iterator

import pytest

from consumers import idle_gc
from consumers.idle_gc import IdleCollectingSelector, idle_collecting_loop


@pytest.fixture
def young_collections() -> Iterator[list[int]]:
    """The generation of every collection that runs while the test does."""
    seen: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            seen.append(info["generation"])

    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)


def _allocate(count: int) -> list[list[int]]:
    """``count`` tracked containers kept alive, so the young generation's count stays above them."""
    return [[i] for i in range(count)]


def _high_threshold() -> tuple[int, int, int]:
    """No automatic collection during the test: only the selector's may run."""
    before = gc.get_threshold()
    gc.set_threshold(1_000_000, before[1], before[2])
    return before


def test_a_waiting_loop_collects_the_young_generation_first(young_collections: list[int]) -> None:
    before = _high_threshold()
    loop = idle_collecting_loop(200)
    try:
        kept = _allocate(1_000)
        assert gc.get_count()[0] >= 200
        loop.run_until_complete(asyncio.sleep(0.05))  # the loop blocks: nothing ready, a timer 50 ms away
        selector = loop._selector  # type: ignore[attr-defined]
        assert isinstance(selector, IdleCollectingSelector)
        assert selector.collections >= 1
        assert 0 in young_collections
        assert gc.get_count()[0] < 200
        del kept
    finally:
        loop.close()
        gc.set_threshold(*before)


def test_a_busy_loop_a_small_young_generation_and_zero_never_collect(young_collections: list[int]) -> None:
    before = _high_threshold()
    busy, small, off = IdleCollectingSelector(200), IdleCollectingSelector(10**9), IdleCollectingSelector(0)
    try:
        kept = _allocate(1_000)
        busy.select(0)  # callbacks are ready: the loop polls without waiting
        busy.select(idle_gc.IDLE_MIN_WAIT_S / 2)  # a timer is about to fire
        small.select(0.01)
        off.select(0.01)
        gc.disable()
        try:
            IdleCollectingSelector(200).select(0.01)  # the collector is paused (the service's imports)
        finally:
            gc.enable()
        assert (busy.collections, small.collections, off.collections) == (0, 0, 0)
        assert young_collections == []
        del kept
    finally:
        for selector in (busy, small, off):
            selector.close()
        gc.set_threshold(*before)


def test_the_wait_after_a_collection_is_shortened_by_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timer due in 30 ms still fires on time when the collection took 20 ms of it."""
    clock = iter([100.0, 100.02])
    monkeypatch.setattr(idle_gc.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(idle_gc.gc, "collect", lambda generation=2: 0)
    waited: list[float | None] = []

    def parent_select(self: object, timeout: float | None = None) -> list[object]:
        waited.append(timeout)
        return []

    monkeypatch.setattr(selectors.DefaultSelector, "select", parent_select)
    before = _high_threshold()
    selector = IdleCollectingSelector(1)
    try:
        kept = _allocate(10)
        selector.select(0.03)
        assert selector.collections == 1
        assert waited == [pytest.approx(0.01)]
        del kept
    finally:
        selector.close()
        gc.set_threshold(*before)


def test_turnstile_run_serves_on_a_loop_that_collects_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    from consumers import cli

    seen: list[object] = []

    async def served(settings: object) -> int:
        seen.append(asyncio.get_running_loop()._selector)  # type: ignore[attr-defined]
        return 0

    monkeypatch.setattr(cli, "_run", served)
    monkeypatch.setenv("TURNSTILE_GC_IDLE_THRESHOLD", "123")
    assert cli.main(["run"]) == 0
    assert len(seen) == 1 and isinstance(seen[0], IdleCollectingSelector)
    assert seen[0].min_young == 123
