"""Stopping a background task for sure: cancel it, and cancel it again while it runs on.

A cancellation can be lost. On Python 3.11 ``asyncio.wait_for`` returns the awaited result, instead of
raising ``CancelledError``, when the task is cancelled just after that result came in (gh-86296, fixed in
3.12's rewrite on ``asyncio.timeout``); nats-py waits for its requests' answers that way. A renewal loop so
cancelled renews on, and a ``stop()`` that cancelled it once and awaited it waited for ever.
"""

from __future__ import annotations

import asyncio
from typing import Any

CANCEL_AGAIN_S = 0.5  # a task still running this long after a cancel is cancelled again


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and return once it has ended, whatever its outcome (not raised: retrieved)."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=CANCEL_AGAIN_S)
    if not task.cancelled():
        task.exception()  # retrieved: an error of a task being stopped is not logged as never retrieved
