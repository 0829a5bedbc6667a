"""Loops that must end when cancelled just as what they wait for arrives.

On Python 3.11 ``asyncio.wait_for`` returns the awaited result instead of raising when its task is
cancelled after that result is in (gh-86296, fixed in 3.12; ``consumers/task_stop.py``): a loop
waiting that way runs on after the cancel. The queues here answer ``get`` with a future the test
completes just before it cancels, which is exactly that moment (``tests/unit/test_renewal_stop.py``).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson

from consumers.cli_stream import _follow_turn
from consumers.inspector_live import LiveStream
from consumers.publisher import StreamAcks
from consumers.task_stop import cancel_and_wait
from schemas.subjects import Subjects
from tests.waiting import wait_for

ENDS_WITHIN_S = 5.0


class AnswersOnCue:
    """A queue whose ``get`` answers with a future: the first one the test completes, later ones never."""

    def __init__(self) -> None:
        self.asked: list[asyncio.Future[Any]] = []

    def get(self) -> asyncio.Future[Any]:
        self.asked.append(asyncio.get_running_loop().create_future())
        return self.asked[-1]


class Page:
    """The SSE response: what was written to the page."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.written.append(data)


async def _answer_then_cancel(queue: AnswersOnCue, task: asyncio.Task[Any], item: Any) -> None:
    await wait_for(lambda: queue.asked, what="the loop to wait for an item")
    queue.asked[0].set_result(item)  # the item is in ...
    task.cancel()  # ... as the loop is cancelled: it must end, not go on
    try:
        await asyncio.wait([task], timeout=ENDS_WITHIN_S)
        assert task.cancelled(), "the loop ran on after its cancel"
    finally:
        await cancel_and_wait(task)


async def test_a_live_stream_ends_when_an_item_arrives_as_it_is_cancelled() -> None:
    nc = SimpleNamespace(is_closed=False, is_draining=False)  # the service runs on: only the cancel ends it
    stream = LiveStream(SimpleNamespace(subjects=Subjects("t")), nc, None)  # type: ignore[arg-type]
    queue = AnswersOnCue()
    stream._queue = queue  # type: ignore[assignment]
    page = Page()
    pump = asyncio.create_task(stream._pump(page))  # type: ignore[arg-type]
    await _answer_then_cancel(queue, pump, {"kind": "event", "type": "turn.started"})
    assert page.written == []


async def test_send_stops_following_the_turn_when_an_output_arrives_as_it_is_cancelled() -> None:
    queue = AnswersOnCue()
    deadline = asyncio.get_running_loop().time() + 3600  # far: only the cancel (Ctrl-C) ends it
    following = asyncio.create_task(
        _follow_turn(None, queue, "t.outbound.cli.s", "m1", deadline, 3600)  # type: ignore[arg-type]
    )
    other_event = SimpleNamespace(subject="t.events.s.x", data=orjson.dumps({"type": "turn.started", "data": {}}))
    await _answer_then_cancel(queue, following, other_event)


async def test_waiting_for_earlier_publishes_raises_when_cancelled_as_they_are_stored() -> None:
    acks = StreamAcks(None)  # type: ignore[arg-type]
    _subject, _reply, token = acks._register("t.events.s.x", None, False, b"{}", None)  # sent, its ack awaited
    waiting = asyncio.create_task(acks.stored_so_far(3600))
    await wait_for(lambda: acks._barriers, what="the barrier")
    acks._on_ack(str(token).encode(), b'{"stream": "EVENTS", "seq": 1}', None)  # stored ...
    waiting.cancel()  # ... as the session's item is cancelled: it must not go on as if it had waited
    await asyncio.wait([waiting], timeout=ENDS_WITHIN_S)
    assert waiting.cancelled()
