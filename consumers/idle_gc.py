"""Garbage collections between messages, while the event loop is idle, not in the middle of one.

A served process collects its young generation every ``TURNSTILE_GC_THRESHOLD`` allocations
(``consumers.cli.tune_gc``). With many sessions a young collection walks tens of thousands of
objects (measured at 10,000 sessions: 10-30 ms), and the message in progress waits for it.

``IdleCollectingSelector`` is the served event loop's selector. When the loop is about to block,
at least ``TURNSTILE_GC_IDLE_THRESHOLD`` allocations have accumulated, and nothing becomes ready
for ``IDLE_QUIET_S`` (in practice between messages: a commit or a publish's ack inside one
rarely takes that long), it runs one collection, then waits for what is left of the loop's
timeout. Under a backlog the loop never blocks, and the threshold collects as before.

The collection goes through CPython's automatic path (``collect_as_automatic``), not
``gc.collect(0)``: CPython collects the middle and old generations only from that path, choosing
the oldest generation whose count is over its threshold (and, for the old one, only when enough
has been promoted since the last full collection). Explicit young collections that kept the young
count under ``TURNSTILE_GC_THRESHOLD`` would never let it choose, and cyclic garbage promoted out
of the young generation (an evicted session's actor) would stay until the process exits.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import selectors
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

IDLE_QUIET_S = 0.003  # nothing ready for this long: the loop is between messages
IDLE_MIN_WAIT_S = 2 * IDLE_QUIET_S  # a loop that would wait less is busy: a timer is about to fire

log = logging.getLogger(__name__)


class _Allocation:
    """A tracked object whose allocation counts in the young generation (no free list reuses it)."""


def collect_as_automatic() -> bool:
    """Run the collection CPython would run at its next automatic trigger; True when one ran.

    The young threshold is lowered to 1 for two allocations, so the interpreter's own allocation
    check collects, choosing the generation by its own rule; then the threshold is put back. A
    collection resets the young count, so without one it is two higher than before.
    """
    before = gc.get_count()[0]
    young, middle, old = gc.get_threshold()
    gc.set_threshold(1, middle, old)
    try:
        pair = (_Allocation(), _Allocation())
        collected = gc.get_count()[0] < before + len(pair)
    finally:
        gc.set_threshold(young, middle, old)
    del pair
    return collected


class IdleCollectingSelector(selectors.DefaultSelector):
    """The platform's default selector, collecting garbage before a wait once enough is allocated."""

    def __init__(self, min_young: int) -> None:
        super().__init__()
        self.min_young = min_young
        self.collections = 0

    def _due(self, timeout: float | None) -> bool:
        return (
            self.min_young > 0
            and (timeout is None or timeout >= IDLE_MIN_WAIT_S)
            and gc.isenabled()
            and gc.get_count()[0] >= self.min_young
        )

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if not self._due(timeout):
            return super().select(timeout)
        started = time.monotonic()
        ready = super().select(IDLE_QUIET_S)
        if ready:
            return ready
        if collect_as_automatic():
            self.collections += 1
        if timeout is not None:
            timeout = max(0.0, timeout - (time.monotonic() - started))
        return super().select(timeout)


def idle_collecting_loop(min_young: int) -> asyncio.AbstractEventLoop:
    """A new event loop whose idle waits collect garbage first (``min_young`` 0: a plain loop).

    The collections stay off, with a warning, on an interpreter whose automatic collection does
    not run at the allocation that crosses the threshold (CPython 3.12 defers it).
    """
    if min_young > 0 and gc.isenabled() and not collect_as_automatic():
        log.warning("idle garbage collections are off: this interpreter defers its automatic collections")
        min_young = 0
    return asyncio.SelectorEventLoop(IdleCollectingSelector(min_young))


def run_collecting_when_idle(main: Coroutine[Any, Any, T], min_young: int) -> T:
    """``asyncio.run(main)`` on an ``idle_collecting_loop(min_young)``."""
    with asyncio.Runner(loop_factory=lambda: idle_collecting_loop(min_young)) as runner:
        return runner.run(main)
