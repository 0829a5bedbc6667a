"""Waiting in tests: poll for an outcome with a deadline, never a fixed sleep.

A failure reads as "timed out waiting for <what>" at the deadline instead of the
per-test timeout firing somewhere inside a bare loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

DEFAULT_TIMEOUT_S = 20.0


async def wait_for(
    predicate: Callable[[], Any] | Callable[[], Awaitable[Any]],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = 0.02,
    what: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)
