"""A session's turn events and bookkeeping: ``turn.started``, ``usage``, ``turn.ended`` and the
manager's SM-13..16 records, pipelined into the item's ``ItemPublishes``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from consumers.logs import log_context
from consumers.metrics import Metrics
from consumers.publisher import Publisher
from consumers.replies import ItemPublishes
from consumers.runner_ports import SessionRecords
from consumers.turn_inputs import turn_usage
from consumers.turn_stream import TurnStream
from core.engine import Session

log = logging.getLogger(__name__)

USAGE_REMEMBERED = 256  # turns whose reported usage is remembered (a turn may run more than once)


class TurnEvents:
    """Publishes one session's turn events and writes its turn bookkeeping behind the turn."""

    def __init__(
        self,
        session_id: str,
        *,
        book: SessionRecords,
        publisher: Publisher,
        metrics: Metrics,
        publishes: ItemPublishes,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.session_id = session_id
        self._book = book
        self._pub = publisher
        self._metrics = metrics
        self._publishes = publishes
        self._clock = clock
        self._started_at: float | None = None
        self._usage_reported: dict[str, tuple[int, int]] = {}

    async def started(
        self, engine: Session, generation: int | None, *, platform: str | None = None, **data: Any
    ) -> None:
        """SM-16 bookkeeping (written behind; the manager's lock keeps the order) and ``turn.started``;
        with the ``platform`` to answer on, the typing signal and the turn's partial text follow on
        ``<prefix>.stream.<platform>.<sid>`` (``consumers/turn_stream.py``)."""
        log_context(turn_id=str(engine.turn_id))
        self._started_at = time.monotonic()
        started = self._book.turn_started_behind(self.session_id)
        if started is not None:
            self._publishes.behind.append(started)
        self._publishes.unsettled.append(await self._pub.emit(self.session_id, "turn.started", {
            **data, "turn_id": engine.turn_id, "mode": engine.state.mode.kind, "generation": generation,
        }))
        engine.partial_text = None
        if platform is not None and generation is not None:
            stream = TurnStream(self._pub, platform, self.session_id, generation, str(engine.turn_id))
            engine.partial_text = stream.text
            await stream.typing(engine.state.rounds_used + 1)

    async def ended(
        self, engine: Session, generation: int | None, outcome: str, error: str | None, **data: Any
    ) -> None:
        """SM-15 usage, SM-13/14/16 bookkeeping and the ``turn.ended`` event."""
        if outcome == "replied":
            await self._complete_child(engine)
        # Report what this turn used and was not reported yet (a turn can run more than once:
        # retried after a provider error or the round limit, or resumed after a crash).
        total_in, total_out = turn_usage(engine)
        seen_in, seen_out = self._usage_reported.get(str(engine.turn_id), (0, 0))
        tokens_in, tokens_out = max(total_in - seen_in, 0), max(total_out - seen_out, 0)
        self._usage_reported[str(engine.turn_id)] = (max(total_in, seen_in), max(total_out, seen_out))
        while len(self._usage_reported) > USAGE_REMEMBERED:
            self._usage_reported.pop(next(iter(self._usage_reported)))
        self._metrics.turn_ended(outcome, self._started_at, tokens_in, tokens_out)
        self._started_at = None
        if outcome == "error":
            log.warning("session %s: turn %s (inbound %s) failed: %s",
                        self.session_id, engine.turn_id, data.get("inbound_id") or data.get("trigger"), error)
        usage = (tokens_in, tokens_out) if tokens_in or tokens_out else None
        if usage is not None:
            self._publishes.unsettled.append(
                await self._pub.emit(self.session_id, "usage", {"input": tokens_in, "output": tokens_out})
            )
        # SM-15's usage rides on the turn's end: one record write, one ``session.updated``.
        ended = self._book.turn_ended_behind(self.session_id, outcome, error, self._clock(), usage=usage)
        if ended is not None:
            self._publishes.behind.append(ended)
        self._publishes.unsettled.append(await self._pub.emit(self.session_id, "turn.ended", {
            **data, "turn_id": engine.turn_id, "outcome": outcome, "error": error, "mode": engine.state.mode.kind,
            "status": engine.status, "generation": generation,
        }))

    async def _complete_child(self, engine: Session) -> None:
        """SM-16: a child that finishes a turn with a reply is completed with that reply as its
        ``result`` before its turn ends (``session.completed`` precedes ``turn.ended``)."""
        record = self._book.get_session(self.session_id)
        answers = [out.text for out in engine.turn_outputs if out.text]
        if record is None or record.parent_id is None or not answers:
            return
        await self._book.complete_session(self.session_id, answers[-1])
