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
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from consumers.backoff import compute_backoff_s
from consumers.deadline import Deadline
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
        # Messages whose futures are still pending, oldest first (their timeouts end in this order).
        self._settling: dict[_Settling, None] = {}
        # ``settle``'s timeout of the oldest of them: one timer kept across messages (consumers/deadline.py).
        self._deadline = Deadline()

    def stop_timer(self) -> None:
        """Its session's actor ends: the timeout's timer goes, unless messages are still settling
        (their timeout must still fire: a message whose acks never come is republished)."""
        if not self._settling:
            self._deadline.close()

    @property
    def busy(self) -> bool:
        """True while a finished turn's publishes or writes are still landing."""
        return bool(self._tasks or self._settling)

    def spawn(
        self,
        staged: StagedMessage,
        unsettled: list[asyncio.Future[Any]],
        behind: list[asyncio.Future[Any]],
        republish: Republish,
    ) -> None:
        """Finish ``staged`` once ``behind`` writes landed and ``unsettled`` publishes were acked.

        The usual case (every ack in, every write landed) needs no task: a done-callback on the
        futures still pending, one at a time, and the finisher's ``Deadline`` for ``settle``'s timeout.
        A refused or missing ack hands over to a task that republishes."""
        pending = [f for f in (*behind, *unsettled) if not f.done()]
        if not pending:
            self._settled(staged, unsettled, behind, republish)
            return
        settling = _Settling(self, staged, unsettled, behind, republish, pending)
        self._settling[settling] = None
        if len(self._settling) == 1:
            self._deadline.start_at(settling.due, self._oldest_timed_out)

    def _oldest_timed_out(self) -> None:
        next(iter(self._settling))._timed_out()  # its ``_end`` starts the deadline of the next one

    def _ended(self, settling: _Settling) -> None:
        """``settling`` is handed on (finished, or retried in a task): the next oldest's timeout runs."""
        self._settling.pop(settling, None)
        oldest = next(iter(self._settling), None)
        if oldest is None:
            self._deadline.stop()
        else:
            self._deadline.start_at(oldest.due, self._oldest_timed_out)

    def _settled(
        self,
        staged: StagedMessage,
        unsettled: list[asyncio.Future[Any]],
        behind: list[asyncio.Future[Any]],
        republish: Republish,
    ) -> None:
        """Every future is done: finish, or retry what was not acknowledged (in a task)."""
        for future in behind:  # like ``gather(..., return_exceptions=True)``: failures were logged
            if not future.cancelled():
                future.exception()
        if all(not f.cancelled() and f.exception() is None for f in unsettled):
            self.finish(staged)
            return
        self._start(self._retry(staged, republish, settled=False))

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
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
        await self._retry(staged, republish, settled=await self._pub.settle(unsettled))

    async def _retry(self, staged: StagedMessage, republish: Republish, *, settled: bool) -> None:
        for attempt in range(RETRY_ATTEMPTS):
            if settled:
                self.finish(staged)
                return
            log.warning("session %s: replies or events of %s not acknowledged (attempt %d); republishing",
                        self._session_id, staged.message_id, attempt + 1)
            # Doubling from the base; the cap is never reached within RETRY_ATTEMPTS.
            delay_s = compute_backoff_s(attempt + 1, base_s=RETRY_BASE_DELAY_S, max_s=RETRY_BASE_DELAY_S * 2**RETRY_ATTEMPTS)
            await asyncio.sleep(delay_s)
            unsettled: list[asyncio.Future[Any]] = []
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
        while self._tasks or self._settling:
            waits = [w.done() for w in self._settling]
            await asyncio.gather(*list(self._tasks), *waits, return_exceptions=True)


class _Settling:
    """One message's futures still pending, counted down by done-callbacks (``TurnFinisher.spawn``)."""

    __slots__ = ("_behind", "_finisher", "_over", "_pending", "_republish", "_staged", "_unsettled", "_waiters", "due")

    def __init__(
        self,
        finisher: TurnFinisher,
        staged: StagedMessage,
        unsettled: list[asyncio.Future[Any]],
        behind: list[asyncio.Future[Any]],
        republish: Republish,
        pending: list[asyncio.Future[Any]],
    ) -> None:
        self._finisher = finisher
        self._staged = staged
        self._unsettled = unsettled
        self._behind = behind
        self._republish = republish
        # Watched one at a time, the last first: acks read off the connection together are all done
        # by the time the first watched one's callback runs, so a message costs one or two callbacks
        # rather than one per future.
        self._pending = pending
        self._over = False
        self._waiters: list[asyncio.Future[None]] = []
        self.due = asyncio.get_running_loop().time() + finisher._pub.timeout_s  # ``settle``'s timeout
        pending[-1].add_done_callback(self._one_done)

    def done(self) -> asyncio.Future[None]:
        """A future that settles when this message is handed on (finished or retried in a task)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    def _one_done(self, _future: asyncio.Future[Any]) -> None:
        if self._over:
            return
        pending = self._pending
        while pending:
            if not pending[-1].done():
                pending[-1].add_done_callback(self._one_done)
                return
            pending.pop()
        self._end()
        self._finisher._settled(self._staged, self._unsettled, self._behind, self._republish)

    def _timed_out(self) -> None:
        """``settle``'s timeout: acks still missing are given up on and republished (in a task)."""
        if self._over:
            return
        self._end()
        finisher = self._finisher
        if all(f.done() for f in self._behind):
            for future in self._unsettled:
                if not future.done():
                    future.cancel()
            finisher._settled(self._staged, self._unsettled, self._behind, self._republish)
        else:  # writes still landing: wait for them in a task, then settle as before
            finisher._start(finisher._finish_when_settled(self._staged, self._unsettled, self._behind, self._republish))

    def _end(self) -> None:
        self._over = True
        self._finisher._ended(self)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
