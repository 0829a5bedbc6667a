"""A turn's own bookkeeping costs the turn's length, not the conversation's (issue 17).

A real provider is sent the whole context, but the engine's projection for it, the prompt-size
estimates, the checkpoints' splicing and the turn's usage sum must not walk every earlier item
again at each step: a backlog drained into one session would cost O(n²). Counted, not timed:
Python calls made during one plain turn, and transcript items read, stay the same when the
conversation before it is ten times longer.
"""

from __future__ import annotations

import cProfile
import gc
import os
import pstats
from collections.abc import Iterator
from typing import Any, SupportsIndex

from consumers.turn_inputs import turn_usage
from core.engine import Session
from core.engine.chatend import project_transcript
from core.providers import ModelRequest, ScriptedProvider

from .conftest import Recorder, SessionFactory


class CountingList(list[Any]):
    """A transcript list that counts the items read through it (iteration, indexing, slices)."""

    reads = 0

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            self.reads += 1
            yield item

    def __reversed__(self) -> Iterator[Any]:
        for item in super().__reversed__():
            self.reads += 1
            yield item

    def __getitem__(self, index: Any) -> Any:  # type: ignore[override]
        got = super().__getitem__(index)
        self.reads += len(got) if isinstance(index, slice) else 1
        return got

    def index(self, value: Any, start: SupportsIndex = 0, stop: SupportsIndex = 2**63 - 1) -> int:
        raise AssertionError("a turn searched the transcript")


async def _turn(session: Session, text: str) -> tuple[int, int]:
    """Python calls and transcript items read by one plain turn and its usage sum."""
    transcript = session.state.transcript
    assert isinstance(transcript, CountingList)
    transcript.reads = 0
    profiler = cProfile.Profile()
    gc.disable()  # a collection's finalizers would add calls that depend on when it runs
    profiler.enable()
    try:
        await session.begin_user_turn(text)
        await session.run_pending_turn("op", Recorder())
        tokens_in, _ = turn_usage(session)
    finally:
        profiler.disable()
        gc.enable()
    assert tokens_in > 0
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    # The in-memory journal of the tests (``tests/fakes``) is O(entries) per append: not counted.
    calls = sum(row[1] for (file, _, _), row in stats.items() if f"{os.sep}tests{os.sep}" not in file)
    return calls, transcript.reads


async def _after(make_session: SessionFactory, turns: int) -> tuple[int, int]:
    session = await make_session(session_id=f"s-after-{turns}")
    session.state.transcript = CountingList(session.state.transcript)
    for i in range(turns):
        await session.begin_user_turn(f"message {i}")
        await session.run_pending_turn("op", Recorder())
    await _turn(session, "warm")  # the first measured-shaped turn primes caches (pydantic, the memo)
    return await _turn(session, "measured")


async def test_a_plain_turn_costs_the_same_after_40_and_after_400_earlier_turns(make_session: SessionFactory) -> None:
    # Both past the checkpoint's window of its newest 64 events (each turn then drops as many as it adds).
    short_calls, short_reads = await _after(make_session, 40)
    long_calls, long_reads = await _after(make_session, 400)
    assert long_reads == short_reads, f"transcript items read: {short_reads} after 40 turns, {long_reads} after 400"
    assert long_calls == short_calls, f"Python calls: {short_calls} after 40 turns, {long_calls} after 400"


async def test_the_provider_is_given_the_whole_projection_and_its_content_size(make_session: SessionFactory) -> None:
    seen: list[ModelRequest] = []

    class Spy(ScriptedProvider):
        async def complete(self, request: ModelRequest) -> Any:
            seen.append(request)
            return await super().complete(request)

    session = await make_session(provider=Spy())
    for i in range(3):
        await session.begin_user_turn(f"message {i} é")
        await session.run_pending_turn("op", Recorder())
    request = seen[-1]
    assert request.messages == project_transcript(session.transcript)[:-1]  # before its own answer
    assert request.content_chars == sum(len(m["content"]) for m in request.messages)
    answer = _answer()
    without = ScriptedProvider._estimate(request.model_copy(update={"content_chars": None}), answer.text, answer.tool_calls)
    assert ScriptedProvider._estimate(request, answer.text, answer.tool_calls) == without


def _answer() -> Any:
    from core.providers import ModelResponse

    return ModelResponse(text="echo")
