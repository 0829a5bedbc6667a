"""Read-only queries over a session's accepted state (mixed into ``Session``)."""

from __future__ import annotations

from typing import Any

from core.engine.answers import EVENT_KINDS, RESPONSE_KINDS, EventAnswers
from core.engine.journal import HistoryJournal
from core.engine.snapshot import Status, build_snapshot, status_of
from core.engine.state import MAX_EXTERNAL_EVENTS, SessionState, TranscriptItem, TurnOutput
from core.providers.base import Usage


class SessionView:
    """Properties and queries the worker reads; never mutates state."""

    _state: SessionState
    system_prompt: str
    _running_op: str | None
    journal: HistoryJournal
    _known_events: set[str] | None
    _looked_up_one: bool

    def answer_for_external_event(self, external_event_id: str) -> dict[str, Any] | None:
        """The newest terminal response for exactly that event, or None (KS-14)."""
        terminal = [r for r in self.responses_for_external_event(external_event_id) if r["terminal"]]
        return terminal[-1] if terminal else None

    def responses_for_external_event(self, external_event_id: str) -> list[dict[str, Any]]:
        """All agent/system responses for that event, in transcript order (KS-14)."""
        return [dict(r) for r in self._state.external_responses.get(external_event_id, [])]

    async def lookup_external_event(self, external_event_id: str) -> EventAnswers:
        """KS-14 beyond the state's recent events: the responses and inbound ids of that event.

        From the state when it can know — the event is among its recent ones with its user
        message still in the transcript, or it never dropped an event — else from the journal:
        the first time after a load, that event's entries alone (one indexed read, whatever the
        session's length: a reopened session's next message is often its only one); from the
        second on, the ids of every event the journal holds entries of are read once (an
        index-only read) and kept current, so a new event costs no read while the session stays
        loaded, and an event among them is looked up.
        """
        recent = self._state.external_responses.get(external_event_id)
        if recent is None and len(self._state.external_responses) < MAX_EXTERNAL_EVENTS:
            return EventAnswers()
        if recent is None:
            if self._known_events is None and not self._looked_up_one:
                self._looked_up_one = True
                return await self._answers_in_journal(external_event_id)
            if self._known_events is None:
                known = await self.journal.event_ids(self._state.session_id)
                if self._known_events is None:  # another lookup may have read it meanwhile
                    self._known_events = known | set(self._state.external_responses)
            if external_event_id not in self._known_events:
                return EventAnswers()
            return await self._answers_in_journal(external_event_id)
        users = [
            (str(item.get("turn_id")), str(item["payload"]["inbound_id"])) for item in self._state.transcript
            if item.get("kind") == "user_message" and item.get("external_event_id") == external_event_id
            and (item.get("payload") or {}).get("inbound_id")
        ]
        if users:
            return EventAnswers([dict(r) for r in recent], dict(reversed(users)))
        return EventAnswers.from_entries(
            await self.journal.entries_for_event(self._state.session_id, external_event_id, EVENT_KINDS)
        )

    async def _answers_in_journal(self, external_event_id: str) -> EventAnswers:
        """The event's answers from its journal entries; none when nothing responded to it (its user
        message alone is no answer)."""
        entries = await self.journal.entries_for_event(self._state.session_id, external_event_id, EVENT_KINDS)
        if not any(entry.kind in RESPONSE_KINDS for entry in entries):
            return EventAnswers()
        return EventAnswers.from_entries(entries)

    def requires_history_ingress(self) -> bool:
        """True only for an ordinary conversation whose source has terminated (KS-16)."""
        return self._state.mode.is_conversation and self._state.source_terminated

    def snapshot(self) -> dict[str, Any]:
        """The complete versioned snapshot (KS-20)."""
        return build_snapshot(self._state, self.system_prompt)

    @property
    def state(self) -> SessionState:
        """The accepted state (treat as read-only)."""
        return self._state

    @property
    def session_id(self) -> str:
        """The session id."""
        return self._state.session_id

    @property
    def pending_turn(self) -> bool:
        """Whether a turn waits to be run (or is running)."""
        return self._state.turn.pending

    @property
    def turn_id(self) -> str | None:
        """Id of the current turn, or of the last one once it ended."""
        return self._state.turn.turn_id

    @property
    def pending_external_event_id(self) -> str | None:
        """External event id of the pending turn."""
        return self._state.turn.external_event_id if self._state.turn.pending else None

    @property
    def turn_outputs(self) -> list[TurnOutput]:
        """Deliveries of the current/last turn in order (answer text, reply texts, objects)."""
        return list(self._state.turn.outputs)

    @property
    def completed(self) -> bool:
        """Whether the session is completed (non-conversation modes after commit)."""
        return self._state.completed

    @property
    def rounds_used(self) -> int:
        """Model rounds used by the current turn."""
        return self._state.rounds_used

    @property
    def exhausted(self) -> bool:
        """Whether the pending turn hit the round limit."""
        return self._state.exhausted

    @property
    def transcript(self) -> list[TranscriptItem]:
        """The (possibly compacted) transcript items."""
        return self._state.transcript

    @property
    def usage_total(self) -> Usage:
        """All model usage of this session (chat, summaries, transcription)."""
        return self._state.usage_total

    @property
    def status(self) -> Status:
        """idle | pending | exhausted | completed."""
        return status_of(self._state)

    @property
    def running(self) -> bool:
        """Whether run_pending_turn is executing."""
        return self._running_op is not None
