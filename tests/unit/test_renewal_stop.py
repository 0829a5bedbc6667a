"""Stopping a lease renewer whose broker answer lands at the moment it is cancelled.

On Python 3.11 ``asyncio.wait_for`` returns the awaited result instead of raising when its task is
cancelled after that result is in (gh-86296, fixed in 3.12): a renewal loop so cancelled went on
renewing, and ``stop()`` waited for it for ever (a service's shutdown hung in CI, 2026-12-06,
``tests/integration/test_known_tail.py``). The KV here answers with a future the test completes just
before ``stop()`` cancels, which is exactly that moment; no broker can be timed to it.
"""

from __future__ import annotations

import asyncio
import time

from consumers.lease import OwnershipLease
from consumers.ownership import Held, PartitionOwnership


class AnswersOnCue:
    """A KV whose ``update`` answers with a future the test completes."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.asked = asyncio.Event()
        self.deleted: int | None = None

    def update(self, key: str, value: bytes, last: int | None = None) -> asyncio.Future[int]:
        self.asked.set()
        return self.answer

    async def delete(self, key: str, last: int | None = None) -> None:
        self.deleted = last


async def _no_transition(_partitions: list[int]) -> None:
    return None


async def test_partition_ownership_stops_when_a_renewal_answers_as_it_is_cancelled() -> None:
    kv = AnswersOnCue()
    ownership = PartitionOwnership(
        js=None, bucket="b", partitions=1, ttl_s=0.6, on_gained=_no_transition, on_lost=_no_transition,  # type: ignore[arg-type]
    )
    ownership._kv = kv  # type: ignore[assignment]
    ownership._member_at = time.monotonic() + 3600  # no member heartbeat in this test
    ownership.held[0] = Held(revision=1, epoch=1, renewed_at=time.monotonic() - 0.25)  # ours, and due
    ownership._renewer = asyncio.create_task(ownership._renew_loop())
    await asyncio.wait_for(kv.asked.wait(), 5)
    kv.answer.set_result(2)  # the broker's answer is in ...
    await asyncio.wait_for(ownership.stop(), 5)  # ... as stop() cancels the renewer: it must end


async def test_the_ownership_lease_renewer_ends_when_a_renewal_answers_as_it_is_cancelled() -> None:
    kv = AnswersOnCue()
    lease = OwnershipLease(js=None, bucket="b", ttl_s=0.15)  # type: ignore[arg-type]
    lease._kv = kv  # type: ignore[assignment]
    lease._revision = 1
    lease._renewer = asyncio.create_task(lease._renew(lambda: None))
    await asyncio.wait_for(kv.asked.wait(), 5)
    renewer = lease._renewer
    kv.answer.set_result(2)  # the broker's answer is in ...
    renewer.cancel()  # ... as release() cancels the renewer: it must end, not renew on
    await asyncio.wait([renewer], timeout=5)
    assert renewer.cancelled()
    await asyncio.wait_for(lease.release(), 5)
    assert kv.deleted is not None and not lease.held
