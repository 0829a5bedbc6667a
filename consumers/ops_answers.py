"""``answer.lookup`` (KS-14): how a session answered an external event, read from its journal.

The journal keeps a session's whole history (until the session is deleted), so an event
answered many turns ago is found as well as the last one; no actor and no session load
are needed: journal appends are durable when they return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from consumers.api import Operation
from core.engine.answers import EVENT_KINDS, EventAnswers
from core.errors import NotFound, Unavailable
from schemas.turns_control import AnswerLookupOut, AnswerLookupRequest, AnswerReplyOut

if TYPE_CHECKING:
    from consumers.service import TurnstileService


def operations(service: TurnstileService) -> list[Operation]:
    """The answer-area operations, bound to the running service."""

    async def lookup(req: AnswerLookupRequest) -> AnswerLookupOut:
        if service.engines is None or service.manager is None:
            raise Unavailable("the service is not running")
        # The current generation's history: an answer given before a deletion of the id is not its answer.
        entries = await service.engines.journal.entries_for_event(
            req.session_id, req.external_event_id, EVENT_KINDS, generation=service.manager.generation_of(req.session_id)
        )
        if not entries and service.manager.get_session(req.session_id) is None:
            raise NotFound(f"session {req.session_id!r} not found")
        answers = EventAnswers.from_entries(entries)
        replies = [
            AnswerReplyOut(seq=int(r["seq"]), kind=str(r["kind"]), text=r.get("text"), object_id=r.get("object_id"),
                           at=r.get("at"))
            for r in answers.replies
        ]
        return AnswerLookupOut(answered=answers.answer is not None, turn_id=answers.turn_id, replies=replies)

    return [Operation("answer", "lookup", AnswerLookupRequest, lookup,
                      "how the session answered an external event (KS-14), from its journal")]
