"""``replay`` asks again when a pull times out, whichever TimeoutError nats-py raises."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import nats.errors
import pytest

from consumers.replay import replay
from schemas.subjects import Subjects


class TimingOutJetStream:
    """One pending message whose first pull times out; the second finds nothing pending."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.pending = [1, 0]
        self.unsubscribed = False

    async def pull_subscribe(self, *args: Any, **kwargs: Any) -> TimingOutJetStream:
        return self

    async def consumer_info(self) -> SimpleNamespace:
        return SimpleNamespace(num_pending=self.pending.pop(0))

    async def fetch(self, batch: int, timeout: float) -> list[Any]:  # noqa: ASYNC109 (nats-py's fetch(batch, timeout), called with timeout=)
        raise self.error

    async def unsubscribe(self) -> None:
        self.unsubscribed = True


@pytest.mark.parametrize("error", [TimeoutError(), nats.errors.TimeoutError()])
async def test_a_pull_that_times_out_either_way_is_asked_again(error: Exception) -> None:
    # nats-py raises asyncio.TimeoutError, not its own, when its first no-wait pull used the whole timeout.
    js = TimingOutJetStream(error)
    got = [r async for r in replay(js, Subjects("t"), "s1", "events")]  # type: ignore[arg-type]
    assert got == [] and js.pending == [] and js.unsubscribed
