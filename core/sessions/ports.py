"""The ports the session manager talks through: its repository and its event sink."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from core.sessions.records import JsonObject, PlaceRecord, SessionRecord, WorkspaceRecord

SessionEventType = Literal["session.created", "session.updated", "session.completed", "session.deleted"]
SESSION_EVENT_TYPES: Final[tuple[SessionEventType, ...]] = (
    "session.created",
    "session.updated",
    "session.completed",
    "session.deleted",
)

# Called after session.deleted to clear deleted sessions' history and per-session data: a chunk of
# a deleted subtree at a time, children before parents, each id's session.deleted already stored.
ClearSessionData = Callable[[Sequence[str]], Awaitable[None]]


@dataclass(frozen=True)
class StoredState:
    """Everything the manager loads at start: records, places, workspaces and generations."""

    sessions: tuple[SessionRecord, ...] = ()
    places: tuple[PlaceRecord, ...] = ()
    workspaces: tuple[WorkspaceRecord, ...] = ()
    generations: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class StoreChange:
    """One atomic write: upserts and deletions across the four tables, applied together."""

    sessions: tuple[SessionRecord, ...] = ()
    deleted_sessions: tuple[str, ...] = ()
    places: tuple[PlaceRecord, ...] = ()
    deleted_places: tuple[str, ...] = ()
    workspaces: tuple[WorkspaceRecord, ...] = ()
    deleted_workspaces: tuple[str, ...] = ()
    generations: tuple[tuple[str, int], ...] = ()

    def is_empty(self) -> bool:
        """True when there is nothing to write."""
        return not any(
            (
                self.sessions,
                self.deleted_sessions,
                self.places,
                self.deleted_places,
                self.workspaces,
                self.deleted_workspaces,
                self.generations,
            )
        )


class SessionRepository(Protocol):
    """Where session records, places, workspaces and generations persist.

    ``apply`` writes one ``StoreChange`` atomically (all or nothing); upserts are
    by primary key (session id, place key, workspace id, session id).
    ``children`` and ``kind`` of stored records are not trusted: the manager
    derives them at load.
    """

    async def load(self) -> StoredState:
        """Read everything."""
        ...

    async def apply(self, change: StoreChange, *, lazy: bool = False) -> None:
        """Write ``change`` in one transaction. ``lazy``: nobody waits for it on a turn's path
        (turn bookkeeping), so it may wait briefly to share the store's next transaction."""
        ...

    def hurry(self) -> None:
        """Write the lazy changes waiting for company now (someone waits for one of them)."""
        ...


class EventSink(Protocol):
    """Receives session events; ``payload`` holds the record as JSON (``session``) and extras."""

    async def emit(self, session_id: str, event_type: str, payload: JsonObject) -> None:
        """Publish one event."""
        ...

    async def emit_all(self, events: Sequence[tuple[str, str, JsonObject]]) -> None:
        """Publish ``(session_id, event_type, payload)`` events in this order; all stored on return."""
        ...

    async def stored_so_far(self) -> None:
        """Return once everything published before the call (events, replies) is stored (SM-22)."""
        ...
