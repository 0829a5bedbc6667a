"""A turn's progress chunks: typing first, deltas in order, a reset when the text starts over,
and a publish failure that never reaches the turn."""

from __future__ import annotations

from typing import Any, cast

from consumers.publisher import Publisher
from consumers.turn_stream import TurnStream
from schemas.subjects import Subjects
from schemas.wire import StreamChunk


class FakePublisher:
    """Keeps what would go out on core NATS; ``broken`` makes every publish fail."""

    def __init__(self, broken: bool = False) -> None:
        self.subjects = Subjects("t")
        self.sent: list[tuple[str, StreamChunk]] = []
        self.broken = broken

    async def ephemeral(self, subject: str, payload: bytes) -> None:
        if self.broken:
            raise ConnectionError("nats connection closed")
        self.sent.append((subject, StreamChunk.model_validate_json(payload)))


def _stream(publisher: FakePublisher) -> TurnStream:
    return TurnStream(cast(Publisher, publisher), "tg", "tg:group 42", 3, "turn-1")


async def test_deltas_extend_the_round_and_a_new_round_or_a_restart_resets() -> None:
    publisher = FakePublisher()
    stream = _stream(publisher)
    await stream.typing(1)
    for round_no, text in [(1, "Hel"), (1, "Hello"), (1, "Hello"), (2, "Sun"), (2, "Sunny"), (2, "S"), (2, "So")]:
        await stream.text(round_no, text)
    subjects = {s for s, _ in publisher.sent}
    assert subjects == {"t.stream.tg.tg:group~2042"}
    got: list[tuple[Any, ...]] = [(c.type, c.seq, c.round, c.delta, c.reset, c.text_chars) for _, c in publisher.sent]
    assert got == [
        ("typing", 0, 1, "", False, 0),
        ("text", 1, 1, "Hel", True, 3),
        ("text", 2, 1, "lo", False, 5),  # the unchanged text was not sent again
        ("text", 3, 2, "Sun", True, 3),
        ("text", 4, 2, "ny", False, 5),
        ("text", 5, 2, "S", True, 1),  # a retried attempt starts over
        ("text", 6, 2, "o", False, 2),
    ]
    assert {(c.session_id, c.generation, c.turn_id) for _, c in publisher.sent} == {("tg:group 42", 3, "turn-1")}


async def test_a_resumed_turn_signals_typing_again_and_restarts_its_sequence() -> None:
    publisher = FakePublisher()
    stream = _stream(publisher)
    await stream.typing(1)
    await stream.text(1, "abc")
    await stream.typing(2)
    await stream.text(2, "abc")
    assert [(c.type, c.seq, c.reset) for _, c in publisher.sent] == [
        ("typing", 0, False), ("text", 1, True), ("typing", 0, False), ("text", 1, True),
    ]


async def test_a_failed_publish_is_swallowed() -> None:
    stream = _stream(FakePublisher(broken=True))
    await stream.typing(1)
    await stream.text(1, "still fine")
