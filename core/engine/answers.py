"""Answers per external event (KS-14), for as long as the journal keeps the session's history.

The state remembers the responses of the newest ``MAX_EXTERNAL_EVENTS`` events only (they
ride in every checkpoint). ``EventAnswers`` is the durable view: built from the state when
the state can know (the event is there, or nothing was ever evicted), else from the journal
entries tied to the event (``HistoryJournal.entries_for_event``, an indexed lookup): the first
such lookup after a load reads that event alone. So that a new event costs no read per message
after that, a loaded session then reads the ids of every event its journal holds entries for
once (``HistoryJournal.event_ids``, an index-only read) and keeps that set current as it
commits; an event in it is looked up, one outside it has no entries and so no answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from core.engine.journal import EntryKind, JournalEntry

# The entry kinds that respond to an event; with the user message that began its turn.
RESPONSE_KINDS = (EntryKind.AGENT_MESSAGE, EntryKind.NOTICE, EntryKind.OBJECT, EntryKind.REPLY)
EVENT_KINDS = (EntryKind.USER_MESSAGE, *RESPONSE_KINDS)


def response_record(entry: JournalEntry) -> dict[str, Any] | None:
    """The response an entry records for its external event (the reducer's shape), or None."""
    payload = entry.payload
    record: dict[str, Any]
    if entry.kind == EntryKind.AGENT_MESSAGE:
        if payload.get("tool_calls") or not payload.get("text"):
            return None
        record = {"text": payload["text"], "terminal": True}
    elif entry.kind == EntryKind.REPLY:
        record = {"text": payload["text"], "terminal": True}
    elif entry.kind == EntryKind.NOTICE:
        record = {"text": payload.get("text", ""), "terminal": False}
    elif entry.kind == EntryKind.OBJECT and payload.get("delivery"):
        record = {"object_id": payload["object_id"], "terminal": True}
    else:
        return None
    return {"seq": entry.seq, "kind": entry.kind.value, "turn_id": entry.turn_id, "at": entry.at, **record}


@dataclass(frozen=True)
class EventAnswers:
    """What the session holds for one external event: its responses and the inbound messages."""

    responses: list[dict[str, Any]] = field(default_factory=list)
    inbound_ids: dict[str, str] = field(default_factory=dict)  # turn id → inbound id of its user message

    @classmethod
    def from_entries(cls, entries: Iterable[JournalEntry]) -> EventAnswers:
        """Fold the journal entries of one event (any order) into its answers."""
        responses: list[dict[str, Any]] = []
        inbound_ids: dict[str, str] = {}
        for entry in sorted(entries, key=lambda e: e.seq):
            if entry.kind == EntryKind.USER_MESSAGE:
                if entry.payload.get("inbound_id"):
                    inbound_ids.setdefault(str(entry.turn_id), str(entry.payload["inbound_id"]))
                continue
            record = response_record(entry)
            if record is not None:
                responses.append(record)
        return cls(responses, inbound_ids)

    @property
    def answer(self) -> dict[str, Any] | None:
        """The newest terminal response (KS-14 ``answer_for_external_event``)."""
        terminal = [r for r in self.responses if r.get("terminal")]
        return terminal[-1] if terminal else None

    @property
    def turn_id(self) -> str | None:
        """The turn that answered the event."""
        answer = self.answer
        return None if answer is None else answer.get("turn_id")

    @property
    def answering_inbound_id(self) -> str | None:
        """The inbound message that began the answering turn."""
        turn_id = self.turn_id
        return None if turn_id is None else self.inbound_ids.get(turn_id)

    @property
    def replies(self) -> list[dict[str, Any]]:
        """The terminal responses of the answering turn, in order: what was delivered."""
        turn_id = self.turn_id
        return [r for r in self.responses if r.get("terminal") and r.get("turn_id") == turn_id]
