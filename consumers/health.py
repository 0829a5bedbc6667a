"""Is the store taking writes? The inbound pipeline's degraded state and its service events.

``failing`` on a refused write and ``working`` on the next one that succeeds flip the state
and publish ``service.degraded`` / ``service.recovered`` once per change, on the events
stream under the "no session" token (``<prefix>.events._.service.degraded``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

log = logging.getLogger(__name__)

MAX_ERROR_CHARS = 500


class EventPublisher(Protocol):
    """What ServiceHealth needs from the publisher."""

    async def emit(self, session_id: str | None, event_type: str, data: dict[str, Any]) -> asyncio.Future[Any]: ...


class ServiceHealth:
    """The degraded flag a health endpoint can read, and the events that announce its changes."""

    def __init__(self, publisher: EventPublisher) -> None:
        self._publisher = publisher
        self.degraded = False
        self.degraded_since: float | None = None  # epoch seconds
        self.failed_attempts = 0  # refused writes since the state became degraded
        self.last_error: str | None = None
        self._healthy = asyncio.Event()
        self._healthy.set()

    async def failing(self, error: BaseException, waiting: int) -> None:
        """A write was refused; the first refusal after a healthy spell publishes ``service.degraded``."""
        self.failed_attempts += 1
        self.last_error = f"{type(error).__name__}: {error}"[:MAX_ERROR_CHARS]
        if self.degraded:
            return
        self.degraded = True
        self.degraded_since = time.time()
        self._healthy.clear()
        log.warning("the store refuses writes (%s); inbound paused, retrying in place", self.last_error)
        await self._emit(
            "service.degraded", {"reason": "store_unavailable", "error": self.last_error, "waiting": waiting}
        )

    async def working(self) -> None:
        """A write succeeded; the first success after refusals publishes ``service.recovered``."""
        if not self.degraded:
            return
        degraded_s = time.time() - (self.degraded_since or time.time())
        data = {"degraded_s": round(degraded_s, 3), "failed_attempts": self.failed_attempts}
        self.degraded = False
        self.degraded_since = None
        self.failed_attempts = 0
        self._healthy.set()
        log.warning("the store takes writes again after %.1f s; inbound resumed", degraded_s)
        await self._emit("service.recovered", data)

    async def wait_healthy(self) -> None:
        await self._healthy.wait()

    async def _emit(self, event_type: str, data: dict[str, Any]) -> None:
        try:
            await self._publisher.emit(None, event_type, data)  # pipelined; a lost ack is logged there
        except Exception as exc:
            log.warning("publishing %s failed: %r", event_type, exc)
