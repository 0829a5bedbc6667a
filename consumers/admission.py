"""How many sessions may hold work in this process at once: the admission bound on inbound messages.

A session *with work* has an item queued in its actor's mailbox or in hand. Staging outruns turns,
so without a bound a backlog over many sessions becomes one actor per session at once, each
loading its engine before it waits for a turn slot: the process's memory peak grows with the
backlog. ``WorkAdmission`` counts those sessions; a staged message for a session that has no
work yet waits in ``admit`` while ``max_sessions`` already have some. The stager hands off in
order, so while it waits it stages nothing more, the pipeline fills to
``TURNSTILE_MAX_INBOUND_IN_FLIGHT`` and the fetch loop takes no new work (what is fetched but not
staged gets in-progress heartbeats; what is staged is safe in the inbox).

Sessions that only sit loaded and idle are not counted: they are bounded by the loaded cap and
evicted on demand, so a bound on them would stall the drain. The wait is bounded by
``max_wait_s``: a session whose work waits on another session's message (a deletion hold, a
tool awaiting another session) can never keep new sessions out for good.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)

# A staged message for a new session waits at most this long for room, then goes in anyway.
ADMIT_WAIT_MAX_S = 5.0


class WorkAdmission:
    """The set of sessions with work, and a wait for room among at most ``max_sessions`` of them."""

    def __init__(self, max_sessions: int | None, max_wait_s: float = ADMIT_WAIT_MAX_S) -> None:
        self.max_sessions = max_sessions
        self.max_wait_s = max_wait_s
        self._working: set[str] = set()
        self._room = asyncio.Event()
        self.waited_out = 0  # admissions that went in after ``max_wait_s`` without room (metrics, tests)

    def __len__(self) -> int:
        return len(self._working)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._working

    def _full(self) -> bool:
        return self.max_sessions is not None and len(self._working) >= self.max_sessions

    async def admit(self, session_id: str) -> None:
        """Return once ``session_id`` may take work: it has some already, there is room, or
        ``max_wait_s`` passed. The caller then queues its item and calls ``working``."""
        if session_id in self._working or not self._full():
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_s
        while self._full() and session_id not in self._working:
            self._room.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._room.wait()
            except TimeoutError:
                self.waited_out += 1
                log.info("admission: %d sessions still have work after %.1f s; %s goes in anyway",
                         len(self._working), self.max_wait_s, session_id)
                return

    def working(self, session_id: str) -> None:
        """``session_id`` has an item queued or in hand."""
        self._working.add(session_id)

    def done(self, session_id: str) -> None:
        """``session_id`` holds no item any more (its mailbox is empty, or its actor ended)."""
        self._working.discard(session_id)
        if not self._full():
            self._room.set()

    def clear(self) -> None:
        """Shutting down: nobody waits for room any more."""
        self._working.clear()
        self._room.set()
