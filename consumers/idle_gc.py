"""Young garbage collections while the event loop waits, not in the middle of a message.

A served process collects its young generation every ``TURNSTILE_GC_THRESHOLD`` allocations
(``consumers.cli.tune_gc``). With many sessions a young collection walks tens of thousands of
objects (measured at 10,000 sessions: 10-30 ms), and whatever message is in progress waits for it.
``IdleCollectingSelector`` is the served event loop's selector: when the loop is about to block
(nothing ready and no timer due within ``IDLE_MIN_WAIT_S``) and at least
``TURNSTILE_GC_IDLE_THRESHOLD`` allocations have accumulated since the last collection, it collects
the young generation first, and then waits only for what is left of the loop's timeout. Under a
backlog the loop never blocks, and the threshold collects as before.
"""

from __future__ import annotations

import asyncio
import gc
import selectors
import time

IDLE_MIN_WAIT_S = 0.002  # a loop that waits less than this is busy: a timer is about to fire


class IdleCollectingSelector(selectors.DefaultSelector):
    """The platform's default selector, collecting the young generation before a wait when enough is allocated."""

    def __init__(self, min_young: int) -> None:
        super().__init__()
        self.min_young = min_young
        self.collections = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if (
            self.min_young > 0
            and (timeout is None or timeout >= IDLE_MIN_WAIT_S)
            and gc.isenabled()
            and gc.get_count()[0] >= self.min_young
        ):
            started = time.monotonic()
            gc.collect(0)
            self.collections += 1
            if timeout is not None:
                timeout = max(0.0, timeout - (time.monotonic() - started))
        return super().select(timeout)


def idle_collecting_loop(min_young: int) -> asyncio.AbstractEventLoop:
    """A new event loop whose waits collect young garbage first (``min_young`` 0: a plain loop)."""
    return asyncio.SelectorEventLoop(IdleCollectingSelector(min_young))
