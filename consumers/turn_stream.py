"""A turn's ephemeral progress for chat platforms: the typing signal and the partial text.

Published on core NATS (``<prefix>.stream.<platform>.<sid>``, wire model
``schemas.wire.StreamChunk``): nothing stores it, so it costs no fsync and a client that is
not listening misses it. The reply on the outbound stream stays the one durable, deduplicated
answer; this is only a preview of it. Publishing is best effort: a failure is logged and the
turn goes on.
"""

from __future__ import annotations

import logging

from consumers.publisher import Publisher
from schemas.wire import StreamChunk

log = logging.getLogger(__name__)


class TurnStream:
    """The typing signal and partial text of one run of one turn (``seq`` restarts at 0 with typing)."""

    def __init__(self, publisher: Publisher, platform: str, session_id: str, generation: int, turn_id: str) -> None:
        self._pub = publisher
        self._subject = publisher.subjects.stream(platform, session_id)
        self._session_id = session_id
        self._generation = generation
        self._turn_id = turn_id
        self._seq = 0
        self._round = 0
        self._text = ""
        self._failed = False

    async def typing(self, round_no: int) -> None:
        """The turn starts (or resumes): show "typing…"."""
        self._seq, self._round, self._text = 0, 0, ""  # the next text resets what a client shows
        await self._send("typing", round_no, "", reset=False)

    async def text(self, round_no: int, text: str) -> None:
        """The model's text of round ``round_no`` so far (``core.engine.ports.PartialText``)."""
        if round_no == self._round and text.startswith(self._text):
            delta, reset = text[len(self._text):], False
            if not delta:
                return
        else:
            delta, reset = text, True  # a new round, or a retried attempt that starts over
        self._seq += 1
        self._round, self._text = round_no, text
        await self._send("text", round_no, delta, reset=reset)

    async def _send(self, kind: str, round_no: int, delta: str, *, reset: bool) -> None:
        # Encoded by the model's own serializer in one step (about half of a dict dump + orjson).
        chunk = StreamChunk(
            type="typing" if kind == "typing" else "text", session_id=self._session_id,
            generation=self._generation, turn_id=self._turn_id, seq=self._seq, round=round_no,
            delta=delta, reset=reset, text_chars=len(self._text),
        )
        try:
            await self._pub.ephemeral(self._subject, chunk.__pydantic_serializer__.to_json(chunk))
        except Exception as exc:  # progress is a preview: never fail the turn over it
            if not self._failed:
                log.warning("session %s: turn progress not published: %r", self._session_id, exc)
            self._failed = True
