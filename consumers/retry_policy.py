"""The retry policy of a staged message: bounded attempts with exponential backoff, then give up.

One policy object per process (``TURNSTILE_TURN_RETRY_ATTEMPTS``,
``TURNSTILE_TURN_RETRY_MAX_BACKOFF_S``). What happens after the last attempt is the
caller's decision (``MessageRetries.serve`` dead-letters the message, see docs/protocol.md
"Poison messages").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType

from tenacity import AsyncRetrying, RetryCallState

from consumers.backoff import compute_backoff_s
from core.errors import OwnershipLost  # raised here and by the SQL write fence (core/store/partition_epochs.py)

BASE_BACKOFF_S = 0.5

BeforeRetry = Callable[[RetryCallState], Awaitable[None]]


__all__ = ["Attempt", "Attempts", "OwnershipLost", "TurnRetryPolicy"]


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, Exception) and not isinstance(exc, (OwnershipLost, asyncio.CancelledError))


# What a ``RetryCallState`` names as its loop (tenacity requires one; ``before_retry`` reads only
# the attempt number and the outcome).
_STATE_OWNER = AsyncRetrying()


class Attempt:
    """One attempt (``with attempt:``): a retryable failure is kept for the loop, anything else propagates."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: Exception | None = None

    def __enter__(self) -> Attempt:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        if exc is None or not _retryable(exc):
            return False
        assert isinstance(exc, Exception)
        self.error = exc
        return True


class Attempts:
    """``async for attempt in policy.retrying(before_retry): with attempt: ...`` — tenacity's loop shape.

    Tenacity's ``AsyncRetrying`` costs tens of microseconds per loop even when the first attempt
    succeeds (its action chain inspects every callback per attempt); a staged message is served
    once per message, almost always at the first attempt, so the loop is this small one. The
    retries keep tenacity's contract: ``before_retry`` gets a ``RetryCallState`` (attempt number,
    outcome) before each wait, may raise to stop, and the last failure is re-raised.
    """

    def __init__(self, policy: TurnRetryPolicy, before_retry: BeforeRetry) -> None:
        self._policy = policy
        self._before_retry = before_retry
        self._attempt: Attempt | None = None
        self._number = 0

    def __aiter__(self) -> Attempts:
        return self

    async def __anext__(self) -> Attempt:
        previous = self._attempt
        if previous is not None:
            error = previous.error
            if error is None:
                raise StopAsyncIteration
            if self._number >= self._policy.attempts:
                raise error
            state = RetryCallState(_STATE_OWNER, None, (), {})
            state.attempt_number = self._number
            state.set_exception((type(error), error, error.__traceback__))
            await self._before_retry(state)
            await asyncio.sleep(
                compute_backoff_s(self._number, base_s=self._policy.base_backoff_s, max_s=self._policy.max_backoff_s)
            )
        self._number += 1
        self._attempt = Attempt()
        return self._attempt


@dataclass(frozen=True)
class TurnRetryPolicy:
    """How often and how patiently one staged message is retried before it is given up."""

    attempts: int = 6
    max_backoff_s: float = 10.0
    base_backoff_s: float = BASE_BACKOFF_S

    def retrying(self, before_retry: BeforeRetry) -> Attempts:
        """Attempts waiting base × 2^(n-1) s (capped) after the n-th failure; ``before_retry``
        runs before each wait and may raise ``OwnershipLost`` to stop retrying."""
        return Attempts(self, before_retry)
