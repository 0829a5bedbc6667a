"""What becomes of one staged message that fails: retried with backoff, given up, dead-lettered, dropped.

``MessageRetries.serve`` runs one attempt after another (``TurnRetryPolicy``). A message
that keeps failing is dead-lettered on ``<prefix>.dlq.turn`` and dropped
(``message.dropped`` reason ``failed``), so the session goes on with its next message;
a process that no longer owns the session stops instead (``OwnershipLost``, the message
stays staged for the owner). ``drop`` is also how a turn refuses a message (stale
generation, duplicate, busy, …): a ``message.dropped`` event and the inbox mark.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from tenacity import RetryCallState

from consumers.publisher import Publisher
from consumers.replies import ItemPublishes
from consumers.retry_policy import OwnershipLost, TurnRetryPolicy
from core.errors import TurnstileError
from core.store.inbox import DROPPED, SqlInbox, StagedMessage
from schemas.wire import InboundMessage

log = logging.getLogger(__name__)

MAX_ERROR_CHARS = 200
FAILED_REASON = "failed"


class MessageRetries:
    """Serves a session's staged messages with retries; gives up by dead-lettering and dropping."""

    def __init__(
        self,
        session_id: str,
        *,
        publisher: Publisher,
        inbox: SqlInbox,
        publishes: ItemPublishes,
        retry: TurnRetryPolicy,
        still_owner: Callable[[], Awaitable[bool]] | None,
        forget: Callable[[], None],
    ) -> None:
        self.session_id = session_id
        self._pub = publisher
        self._inbox = inbox
        self._publishes = publishes
        self._retry = retry
        # "Does this process still own the session?" (the ownership lease); None: always.
        self._still_owner = still_owner
        # Forget the loaded session: the next attempt restores it from its last checkpoint.
        self._forget = forget

    async def serve(
        self, staged: StagedMessage, inbound: InboundMessage, attempt_once: Callable[[], Awaitable[None]]
    ) -> None:
        """Run ``attempt_once`` until it succeeds, the attempts are spent (dead letter + drop) or the
        session turns out to be another process's (``OwnershipLost`` raised, the message stays staged).
        Otherwise raises only when even the dead letter cannot be published."""
        try:
            async for attempt in self._retry.retrying(self._before_retry):
                with attempt:
                    await attempt_once()
        except OwnershipLost as exc:
            log.warning("session %s: %s; %s stays staged for it", self.session_id, exc, staged.message_id)
            raise
        except Exception as exc:
            self._forget()
            if not await self._owned():
                log.warning("session %s: another process owns it now; %s stays staged for it",
                            self.session_id, staged.message_id)
                raise OwnershipLost("another process owns the session now") from exc
            await self._give_up(staged, inbound, exc)

    async def _owned(self) -> bool:
        return True if self._still_owner is None else await self._still_owner()

    async def _before_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        log.warning("session %s: serving %s failed (attempt %d): %r",
                    self.session_id, getattr(exc, "message", None) or exc, state.attempt_number, exc)
        self._forget()  # forget what we hold: the next attempt restores from the last checkpoint
        # A fence refusal or a lost lease means another process serves this session now: never
        # retry on top of its state, never dead-letter its message.
        if not await self._owned():
            raise OwnershipLost("another process owns the session now")

    async def _give_up(self, staged: StagedMessage, inbound: InboundMessage, exc: Exception) -> None:
        """Dead-letter ``staged`` with its error, then drop it (event + inbox mark)."""
        code = exc.code if isinstance(exc, TurnstileError) else "internal"
        message = (exc.message if isinstance(exc, TurnstileError) else repr(exc))[:MAX_ERROR_CHARS]
        log.error("session %s: %s failed %d times (%s: %s); dead-lettered",
                  self.session_id, staged.message_id, self._retry.attempts, code, message)
        subjects = self._pub.subjects

        async def _log_retry(state: RetryCallState) -> None:
            log.warning("session %s: dead-lettering %s failed (attempt %d)",
                        self.session_id, staged.message_id, state.attempt_number)

        async for attempt in self._retry.retrying(_log_retry):
            with attempt:
                await self._pub.dead_letter(
                    subjects.inbound(inbound.platform, inbound.session_id), staged.payload, None, code, message,
                    session_id=self.session_id, dlq_subject=subjects.dlq_turn,
                    msg_id=f"turn:{staged.platform}:{staged.message_id}",
                )
        await self.drop(staged, inbound, FAILED_REASON, f"{code}: {message}")

    async def drop(self, staged: StagedMessage, inbound: InboundMessage, reason: str, detail: str = "") -> None:
        """Drop ``staged`` without a turn: ``message.dropped`` (``reason``, ``detail``) and the inbox mark."""
        data: dict[str, Any] = {"inbound_id": inbound.id, "reason": reason, "generation": staged.generation}
        if detail:
            data["detail"] = detail
        log.info("session %s: %s dropped without a turn (%s%s)", self.session_id, staged.message_id, reason,
                 f": {detail}" if detail else "")
        self._publishes.unsettled.append(await self._pub.emit(self.session_id, "message.dropped", data))
        self._inbox.mark(staged, DROPPED)
