"""A timeout for one wait at a time, kept as one timer across many short waits.

A hot-path wait that needs a timeout (an actor's idle wait, a checkpoint's ack, a served message's
acks) used to arm a timer and cancel it again almost at once, for every message: a ``TimerHandle``,
a heap push and, later, the cancelled handle's removal from the loop's heap. ``Deadline`` arms its
timer only when none is armed early enough; a timer that fires before the current wait's deadline
re-arms itself for it, and one that fires with no wait under way just ends. So a session served
every few milliseconds arms about one timer per timeout period instead of one per wait.

``expired`` is given to ``start`` and dropped at ``stop``: between waits the deadline holds nothing
of its owner, so an armed timer never keeps an owner in a reference cycle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Deadline:
    """One wait's timeout at a time: ``start`` it, ``stop`` it; ``expired()`` runs if it passes first."""

    __slots__ = ("_at", "_expired", "_timer")

    def __init__(self) -> None:
        self._at = 0.0
        self._expired: Callable[[], None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start(self, timeout_s: float, expired: Callable[[], None]) -> None:
        """Call ``expired`` once ``timeout_s`` from now has passed, unless ``stop`` comes first."""
        self.start_at(asyncio.get_running_loop().time() + timeout_s, expired)

    def start_at(self, when: float, expired: Callable[[], None]) -> None:
        """``start`` with the deadline as the loop's time ``when``."""
        self._at = when
        self._expired = expired
        timer = self._timer
        if timer is None or timer.when() > when:
            if timer is not None:
                timer.cancel()
            self._timer = asyncio.get_running_loop().call_at(when, self._fire, when)

    def stop(self) -> None:
        """The wait is over: ``expired`` will not be called (the timer, left armed, fires for nothing)."""
        self._expired = None

    def close(self) -> None:
        """``stop``, and cancel the timer too (its owner ends)."""
        self._expired = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self, armed_for: float) -> None:
        self._timer = None
        expired = self._expired
        if expired is None:
            return  # no wait under way: the next ``start`` arms a timer again
        if self._at <= armed_for:
            self._expired = None
            expired()
        else:  # armed for an earlier wait's deadline
            self._timer = asyncio.get_running_loop().call_at(self._at, self._fire, self._at)
