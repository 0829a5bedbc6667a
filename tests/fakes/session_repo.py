"""In-memory twins of the session manager's ports (repository, event sink), for tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import Unavailable
from core.sessions.ports import StoreChange, StoredState
from core.sessions.record_json import without_derived
from core.sessions.records import JsonObject, PlaceRecord, SessionRecord, WorkspaceRecord


class InMemorySessionRepository:
    """A ``SessionRepository`` kept in dictionaries; survives a new manager, not the process.

    ``fail_writes`` makes every ``apply`` raise ``Unavailable`` (to test
    failures); ``gate``, when set, is awaited inside every ``apply`` so a test
    can hold a write in flight.
    """

    def __init__(self) -> None:
        self.sessions: dict[str, SessionRecord] = {}
        self.places: dict[str, PlaceRecord] = {}
        self.workspaces: dict[str, WorkspaceRecord] = {}
        self.generations: dict[str, int] = {}
        self.applied: list[StoreChange] = []
        self.fail_writes = False
        self.gate: asyncio.Event | None = None

    async def load(self) -> StoredState:
        """Everything stored."""
        return StoredState(
            sessions=tuple(self.sessions.values()),
            places=tuple(self.places.values()),
            workspaces=tuple(self.workspaces.values()),
            generations=tuple(self.generations.items()),
        )

    def hurry(self) -> None:
        """Nothing waits for company here."""

    async def apply(self, change: StoreChange, *, lazy: bool = False) -> None:
        """Apply ``change`` all at once (after the gate, if one is set)."""
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_writes:
            raise Unavailable("in-memory repository set to fail")
        for record in change.sessions:
            self.sessions[record.id] = without_derived(record)
        for session_id in change.deleted_sessions:
            self.sessions.pop(session_id, None)
        for place in change.places:
            self.places[place.key] = place
        for key in change.deleted_places:
            self.places.pop(key, None)
        for workspace in change.workspaces:
            self.workspaces[workspace.id] = workspace
        for workspace_id in change.deleted_workspaces:
            self.workspaces.pop(workspace_id, None)
        for session_id, generation in change.generations:
            self.generations[session_id] = generation
        self.applied.append(change)


@dataclass(frozen=True)
class EmittedEvent:
    """One event as the recording sink saw it."""

    session_id: str
    event_type: str
    payload: JsonObject


class RecordingEventSink:
    """An ``EventSink`` that keeps every event in order."""

    def __init__(self) -> None:
        self.events: list[EmittedEvent] = []
        self.barriers: list[int] = []  # how many events were recorded at each ``stored_so_far``

    async def emit(self, session_id: str, event_type: str, payload: JsonObject) -> None:
        """Record the event."""
        self.events.append(EmittedEvent(session_id, event_type, payload))

    async def emit_all(self, events: Sequence[tuple[str, str, JsonObject]]) -> None:
        """Record the events in order."""
        self.events.extend(EmittedEvent(*e) for e in events)

    async def stored_so_far(self) -> None:
        """Record where the barrier fell among the events."""
        self.barriers.append(len(self.events))

    def of_type(self, event_type: str) -> list[EmittedEvent]:
        """The recorded events of one type, in order."""
        return [e for e in self.events if e.event_type == event_type]

    def pairs(self) -> list[tuple[str, str]]:
        """(session_id, event_type) of every event, in order."""
        return [(e.session_id, e.event_type) for e in self.events]

    def clear(self) -> None:
        """Forget what was recorded."""
        self.events.clear()
