"""Reading a turn's progress chunks (``<prefix>.stream.<platform>.<sid>``) the way a client shows them."""

from __future__ import annotations

from schemas.wire import StreamChunk
from tests.integration.harness import Collector

PRIVATE = {"type": "private", "target_id": "u", "multi_party": False}


def chunks(stream: Collector) -> list[StreamChunk]:
    return [StreamChunk.model_validate_json(m.data) for m in stream.messages]


def round_text(seen: list[StreamChunk], round_no: int) -> str:
    """What a client shows for a round: its deltas, started again at each reset."""
    text = ""
    for chunk in seen:
        if chunk.type == "text" and chunk.round == round_no:
            text = chunk.delta if chunk.reset else text + chunk.delta
            assert len(text) == chunk.text_chars
    return text
