"""``answer.lookup`` (KS-14): how a session answered an external event, read from its journal.

The journal keeps a session's whole history (until the session is deleted), so an event
answered many turns ago is found as well as the last one; no actor and no session load
are needed: journal appends are durable when they return.
"""

from __future__ import annotations

from consumers.api import Operation
from consumers.session_opener import SessionOpener
from core.engine.answers import EVENT_KINDS, EventAnswers
from core.errors import NotFound
from core.sessions.manager import SessionManager
from schemas.turns_control import AnswerLookupOut, AnswerLookupRequest, AnswerReplyOut


def operations(manager: SessionManager, opener: SessionOpener) -> list[Operation]:
    """The answer-area operations: they read the journal (the opener's) and the manager's generations."""

    async def lookup(req: AnswerLookupRequest) -> AnswerLookupOut:
        # The current generation's history: an answer given before a deletion of the id is not its answer.
        entries = await opener.journal.entries_for_event(
            req.session_id, req.external_event_id, EVENT_KINDS, generation=manager.generation_of(req.session_id)
        )
        if not entries and manager.get_session(req.session_id) is None:
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
