"""The served loop collects garbage while it is idle (TURNSTILE_GC_IDLE_THRESHOLD, consumers/idle_gc.py)."""

from __future__ import annotations

import asyncio
import gc
import selectors
import socket
import time
import weakref
from collections.abc import Iterator

import pytest

from consumers import idle_gc
from consumers.idle_gc import IdleCollectingSelector, collect_as_automatic, idle_collecting_loop


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collection that runs while the test does; no automatic young one.

    The young threshold is raised for the test, so only the selector's collections run.
    """
    seen: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            seen.append(info["generation"])

    before = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1_000_000, before[1], before[2])
    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*before)


class _Node:
    partner: _Node


def _allocate(count: int) -> list[_Node]:
    """``count`` tracked objects kept alive (no free list reuses them: each counts as an allocation)."""
    return [_Node() for _ in range(count)]


def _cycle() -> tuple[list[_Node], list[str]]:
    """A two-object reference cycle, held by the first list; the second fills when the cycle is freed."""
    freed: list[str] = []
    first, second = _Node(), _Node()
    first.partner, second.partner = second, first
    weakref.finalize(first, freed.append, "freed")
    return [first], freed


def test_an_idle_loop_collects_before_it_waits(collections: list[int]) -> None:
    loop = idle_collecting_loop(200)
    try:
        kept = _allocate(1_000)
        assert gc.get_count()[0] >= 200
        loop.run_until_complete(asyncio.sleep(0.05))  # the loop blocks: nothing ready, a timer 50 ms away
        selector = loop._selector  # type: ignore[attr-defined]
        assert isinstance(selector, IdleCollectingSelector)
        assert selector.collections >= 1
        assert 0 in collections
        assert gc.get_count()[0] < 200
        del kept
    finally:
        loop.close()


def test_promoted_cyclic_garbage_is_collected_by_idle_collections_alone(collections: list[int]) -> None:
    """Only idle collections run, yet a cycle that outlived a young collection is freed.

    The cycle is promoted to the middle generation before it becomes garbage; the idle
    collections are the only ones (the young threshold is out of reach), and CPython's rule,
    which they run, collects the middle generation after enough of them, and counts toward
    the old generation's schedule.
    """
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, 3, old)
    selector = IdleCollectingSelector(1)
    try:
        holder, freed = _cycle()
        gc.collect(0)  # the cycle is alive: promoted to the middle generation
        holder.clear()  # now it is garbage there
        gc.collect(0)
        assert freed == []
        old_count = gc.get_count()[2]
        deadline = time.monotonic() + 10
        while not freed and time.monotonic() < deadline:
            keep = _allocate(5)  # a little work between waits, as messages would do
            selector.select(0.01)
            del keep
        assert freed == ["freed"]
        assert collections.count(1) == 1 and set(collections) == {0, 1}  # chosen by CPython, not called
        assert gc.get_count()[2] == old_count + 1
    finally:
        selector.close()
        gc.set_threshold(young, middle, old)


def test_a_busy_loop_a_small_young_generation_and_zero_never_collect(collections: list[int]) -> None:
    busy, small, off = IdleCollectingSelector(200), IdleCollectingSelector(10**9), IdleCollectingSelector(0)
    reader, writer = socket.socketpair()
    try:
        kept = _allocate(1_000)
        busy.select(0)  # callbacks are ready: the loop polls without waiting
        busy.select(idle_gc.IDLE_MIN_WAIT_S / 2)  # a timer is about to fire
        busy.register(reader, selectors.EVENT_READ)
        writer.send(b"x")  # something becomes ready within the quiet wait: inside a message, not between two
        assert len(busy.select(1.0)) == 1
        small.select(0.01)
        off.select(0.01)
        gc.disable()
        try:
            IdleCollectingSelector(200).select(0.01)  # the collector is paused (the service's imports)
        finally:
            gc.enable()
        assert (busy.collections, small.collections, off.collections) == (0, 0, 0)
        assert collections == []
        del kept
    finally:
        for selector in (busy, small, off):
            selector.close()
        reader.close()
        writer.close()


def test_the_wait_after_a_collection_is_shortened_by_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timer due in 30 ms still fires on time when the quiet wait and the collection took 20 ms of it."""
    clock = iter([100.0, 100.02])
    monkeypatch.setattr(idle_gc.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(idle_gc, "collect_as_automatic", lambda: True)
    waited: list[float | None] = []

    def parent_select(self: object, timeout: float | None = None) -> list[object]:
        waited.append(timeout)
        return []

    monkeypatch.setattr(selectors.DefaultSelector, "select", parent_select)
    selector = IdleCollectingSelector(1)
    try:
        kept = _allocate(10)
        selector.select(0.03)
        assert selector.collections == 1
        assert waited == [idle_gc.IDLE_QUIET_S, pytest.approx(0.01)]
        del kept
    finally:
        selector.close()


def test_collecting_as_automatic_runs_cpythons_choice(collections: list[int]) -> None:
    """The middle generation is chosen once its count is over its threshold, as CPython would."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, 2, old)
    try:
        kept = _allocate(10)
        assert collect_as_automatic()
        gc.collect(0)
        gc.collect(0)
        assert collect_as_automatic()
        assert collections[0] == 0 and collections[-1] == 1
        assert gc.get_threshold() == (young, 2, old)
        del kept
    finally:
        gc.set_threshold(young, middle, old)


def test_an_interpreter_that_defers_collections_gets_a_plain_loop(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(idle_gc, "collect_as_automatic", lambda: False)
    loop = idle_collecting_loop(300)
    try:
        assert loop._selector.min_young == 0  # type: ignore[attr-defined]
        assert "idle garbage collections are off" in caplog.text
    finally:
        loop.close()


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
