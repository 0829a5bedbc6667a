"""The retry loop of a staged message: one attempt when it succeeds, backoff and before_retry between failures."""

from __future__ import annotations

import asyncio

import pytest
from tenacity import RetryCallState

from consumers.retry_policy import OwnershipLost, TurnRetryPolicy

FAST = TurnRetryPolicy(attempts=3, max_backoff_s=0.0, base_backoff_s=0.0)


async def test_a_first_attempt_that_succeeds_is_the_only_one() -> None:
    runs = 0

    async def before(_state: RetryCallState) -> None:
        raise AssertionError("no retry expected")

    async for attempt in FAST.retrying(before):
        with attempt:
            runs += 1
    assert runs == 1


async def test_failures_are_retried_with_their_attempt_number_then_the_last_is_raised() -> None:
    seen: list[tuple[int, str]] = []

    async def before(state: RetryCallState) -> None:
        assert state.outcome is not None
        seen.append((state.attempt_number, str(state.outcome.exception())))

    with pytest.raises(ValueError, match="boom 3"):
        n = 0
        async for attempt in FAST.retrying(before):
            with attempt:
                n += 1
                raise ValueError(f"boom {n}")
    assert seen == [(1, "boom 1"), (2, "boom 2")]


async def test_a_later_success_ends_the_loop() -> None:
    n = 0

    async def before(_state: RetryCallState) -> None:
        return None

    async for attempt in FAST.retrying(before):
        with attempt:
            n += 1
            if n < 2:
                raise RuntimeError("transient")
    assert n == 2


async def test_ownership_lost_and_cancellation_are_never_retried() -> None:
    async def before(_state: RetryCallState) -> None:
        raise AssertionError("no retry expected")

    for error in (OwnershipLost("elsewhere"), asyncio.CancelledError()):
        with pytest.raises(type(error)):
            async for attempt in FAST.retrying(before):
                with attempt:
                    raise error


async def test_before_retry_may_stop_the_loop() -> None:
    async def before(_state: RetryCallState) -> None:
        raise OwnershipLost("another process owns it now")

    with pytest.raises(OwnershipLost):
        async for attempt in FAST.retrying(before):
            with attempt:
                raise RuntimeError("fails")
