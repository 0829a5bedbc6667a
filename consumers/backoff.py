"""The one backoff rule of the shell: how long to wait after the n-th failure of a retried step."""

from __future__ import annotations

from collections.abc import Callable

from tenacity import RetryCallState


def compute_backoff_s(attempt: int, *, base_s: float, max_s: float, factor: float = 2.0) -> float:
    """Seconds to wait after the ``attempt``-th consecutive failure (1-based): ``base_s × factor^(attempt-1)``,
    never more than ``max_s`` and never negative."""
    if attempt < 1:
        return 0.0
    # The exponent is bounded so a long outage cannot overflow the float before the cap applies.
    return max(0.0, min(max_s, base_s * factor ** min(attempt - 1, 64)))


def tenacity_wait(*, base_s: float, max_s: float) -> Callable[[RetryCallState], float]:
    """``compute_backoff_s`` as a tenacity ``wait=`` strategy (tenacity counts attempts from 1)."""

    def wait(state: RetryCallState) -> float:
        return compute_backoff_s(state.attempt_number, base_s=base_s, max_s=max_s)

    return wait
