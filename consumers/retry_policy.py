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

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from consumers.backoff import tenacity_wait
from core.errors import OwnershipLost  # raised here and by the SQL write fence (core/store/partition_epochs.py)

BASE_BACKOFF_S = 0.5

BeforeRetry = Callable[[RetryCallState], Awaitable[None]]


__all__ = ["OwnershipLost", "TurnRetryPolicy"]


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, Exception) and not isinstance(exc, (OwnershipLost, asyncio.CancelledError))


@dataclass(frozen=True)
class TurnRetryPolicy:
    """How often and how patiently one staged message is retried before it is given up."""

    attempts: int = 6
    max_backoff_s: float = 10.0
    base_backoff_s: float = BASE_BACKOFF_S

    def retrying(self, before_retry: BeforeRetry) -> AsyncRetrying:
        """A tenacity loop waiting base × 2^(n-1) s (capped) after the n-th failure; ``before_retry``
        runs before each wait and may raise ``OwnershipLost`` to stop retrying."""
        return AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=tenacity_wait(base_s=self.base_backoff_s, max_s=self.max_backoff_s),
            retry=retry_if_exception(_retryable),
            before_sleep=before_retry,
            reraise=True,
        )
