"""Finishing a served message behind the session's actor.

A turn's replies and events are pipelined and its bookkeeping writes run
behind the manager's lock, so the actor can start the next message at once.
``TurnFinisher`` waits for those writes and for the broker's acks, then marks
the message done in the inbox. If acks do not come, it republishes with backoff
the replies the outbound stream does not hold (read back first, so a retry later
than the duplicate window stores nothing twice); if they never come, the message
stays staged and is delivered after a restart — never lost, never answered twice. The session's
next reply does not wait for this retry: it sends a lost earlier reply again itself first
(``consumers/reply_order.py``), so the retry usually finds it stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from consumers.backoff import compute_backoff_s
from consumers.publisher import Publisher
from core.store.inbox import DONE, SqlInbox, StagedMessage

log = logging.getLogger(__name__)

RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY_S = 0.2

Republish = Callable[[list[asyncio.Future[Any]]], Awaitable[None]]


class TurnFinisher:
    """Background completion of served messages for one session."""

    def __init__(self, session_id: str, publisher: Publisher, inbox: SqlInbox, on_done: Callable[[str], None]) -> None:
        self._session_id = session_id
        self._pub = publisher
        self._inbox = inbox
        self._on_done = on_done
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def busy(self) -> bool:
        """True while a finished turn's publishes or writes are still landing."""
        return bool(self._tasks)

    def spawn(
        self,
        staged: StagedMessage,
        unsettled: list[asyncio.Future[Any]],
        behind: list[asyncio.Future[Any]],
        republish: Republish,
    ) -> None:
        """Finish ``staged`` once ``behind`` writes landed and ``unsettled`` publishes were acked."""
        task = asyncio.create_task(self._finish_when_settled(staged, unsettled, behind, republish))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish_when_settled(
        self,
        staged: StagedMessage,
        unsettled: list[asyncio.Future[Any]],
        behind: list[asyncio.Future[Any]],
        republish: Republish,
    ) -> None:
        await asyncio.gather(*behind, return_exceptions=True)
        settled = await self._pub.settle(unsettled)
        for attempt in range(RETRY_ATTEMPTS):
            if settled:
                self.finish(staged)
                return
            log.warning("session %s: replies or events of %s not acknowledged (attempt %d); republishing",
                        self._session_id, staged.message_id, attempt + 1)
            # Doubling from the base; the cap is never reached within RETRY_ATTEMPTS.
            delay_s = compute_backoff_s(attempt + 1, base_s=RETRY_BASE_DELAY_S, max_s=RETRY_BASE_DELAY_S * 2**RETRY_ATTEMPTS)
            await asyncio.sleep(delay_s)
            unsettled = []
            try:
                await republish(unsettled)
            except Exception as exc:  # e.g. the outbound stream unreadable: the next attempt tries again
                log.warning("session %s: republishing %s failed: %r", self._session_id, staged.message_id, exc)
                continue
            settled = await self._pub.settle(unsettled)
        if settled:
            self.finish(staged)
            return
        log.error("session %s: %s stays staged; it is answered again after a restart",
                  self._session_id, staged.message_id)

    def finish(self, staged: StagedMessage) -> None:
        """Mark ``staged`` done now."""
        self._inbox.mark(staged, DONE)
        self._on_done(staged.message_id)

    async def wait(self) -> None:
        """Wait until every spawned finish has completed (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
