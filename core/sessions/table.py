"""The manager's in-memory table: records, children, places, workspaces and generations.

Pure state with synchronous reads; it changes only through ``install`` (or
``put``) of a change that the repository has already written or is writing.

Records are frozen, so the table hands out the very objects it holds: each is
kept with its derived ``kind`` and ``children`` already filled in, and a
parent's record is rebuilt when a child comes or goes. Reads (the hot path of
turn bookkeeping) therefore copy nothing.
"""

from __future__ import annotations

from dataclasses import replace

from core.sessions.ports import StoreChange, StoredState
from core.sessions.records import (
    DEFAULT_WORKSPACE,
    DEFAULT_WORKSPACE_ID,
    DEFAULT_WORKSPACE_KEY,
    PlaceRecord,
    SessionRecord,
    SessionStatus,
    WorkspaceRecord,
)
from core.sessions.rules import root_of, session_kind


def with_kind(record: SessionRecord) -> SessionRecord:
    """SM-1: the record with its kind recomputed from parent and origin (never trusted as given)."""
    kind = session_kind(record.parent_id, record.origin_platform)
    return record if record.kind == kind else replace(record, kind=kind)


class SessionTable:
    """All records of the service, held in memory; reads are synchronous (as in the seed)."""

    def __init__(self) -> None:
        self._records: dict[str, SessionRecord] = {}
        self._children: dict[str, list[str]] = {}
        self._places: dict[str, PlaceRecord] = {}
        self._workspaces: dict[str, WorkspaceRecord] = {}
        self._generations: dict[str, int] = {}

    def load(self, state: StoredState) -> None:
        """Replace everything with ``state`` (records ordered by creation time)."""
        self._records.clear()
        self._children.clear()
        self._places = {p.key: p for p in state.places}
        self._workspaces = {w.id: w for w in state.workspaces if w.id != DEFAULT_WORKSPACE_ID}
        self._generations = dict(state.generations)
        for record in sorted(state.sessions, key=lambda r: (r.created_at, r.id)):
            self.put(record)

    # -- reads ---------------------------------------------------------------

    def get(self, session_id: str) -> SessionRecord | None:
        """The record with its current children, or None (no copy: records are immutable)."""
        return self._records.get(session_id)

    def raw(self, session_id: str) -> SessionRecord | None:
        """The same as ``get``; kept as the name the rules' lookups are written against."""
        return self._records.get(session_id)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._records

    def records(self) -> list[SessionRecord]:
        """Every record with children, in creation order."""
        return list(self._records.values())

    def filtered(self, parent_id: str | None, by_parent: bool, status: SessionStatus | None) -> list[SessionRecord]:
        """Records filtered by parent (when ``by_parent``; None = roots) and status."""
        found = self.records()
        if by_parent:
            found = [r for r in found if r.parent_id == parent_id]
        if status is not None:
            found = [r for r in found if r.status == status]
        return found

    def child_ids(self, parent_id: str) -> list[str]:
        """The ids of ``parent_id``'s children, in creation order."""
        return list(self._children.get(parent_id, ()))

    def subtree(self, session_id: str) -> list[str]:
        """``session_id`` and all its descendants, parents before children."""
        order: list[str] = []
        queue = [session_id]
        seen: set[str] = set()
        while queue:
            current = queue.pop(0)
            if current in seen or current not in self._records:
                continue
            seen.add(current)
            order.append(current)
            queue.extend(self._children.get(current, ()))
        return order

    def root(self, session_id: str) -> SessionRecord | None:
        """The root record of ``session_id``'s tree, or None when the chain is broken."""
        return root_of(session_id, self.raw)

    def generation(self, session_id: str) -> int:
        """The current generation of ``session_id`` (0 if it was never deleted)."""
        return self._generations.get(session_id, 0)

    def place(self, key: str) -> PlaceRecord | None:
        """The place record under ``key``."""
        return self._places.get(key)

    def places(self) -> list[PlaceRecord]:
        """All place records: the default workspace first, then by key."""
        return sorted(self._places.values(), key=lambda p: (p.key != DEFAULT_WORKSPACE_KEY, p.key))

    def workspace(self, workspace_id: str) -> WorkspaceRecord | None:
        """A registered workspace (the default one included)."""
        if workspace_id == DEFAULT_WORKSPACE_ID:
            return DEFAULT_WORKSPACE
        return self._workspaces.get(workspace_id)

    def workspaces(self) -> list[WorkspaceRecord]:
        """The default workspace, then the others in registration order."""
        return [DEFAULT_WORKSPACE, *sorted(self._workspaces.values(), key=lambda w: w.position)]

    def workspace_ids(self) -> set[str]:
        """Ids of the registered (non-default) workspaces."""
        return set(self._workspaces)

    def next_workspace_position(self) -> int:
        """A registration position after every existing one."""
        return max((w.position for w in self._workspaces.values()), default=0) + 1

    # -- writes --------------------------------------------------------------

    def bump_generation(self, session_id: str) -> int:
        """Give ``session_id`` a never-before-given generation (SM-22) and return it."""
        value = self._generations.get(session_id, 0) + 1
        self._generations[session_id] = value
        return value

    def install(self, change: StoreChange) -> None:
        """Make the table reflect a change the repository has written."""
        for session_id in change.deleted_sessions:
            self._remove(session_id)
        for record in change.sessions:
            self.put(record)
        for key in change.deleted_places:
            self._places.pop(key, None)
        for place in change.places:
            self._places[place.key] = place
        for workspace_id in change.deleted_workspaces:
            self._workspaces.pop(workspace_id, None)
        for workspace in change.workspaces:
            if workspace.id != DEFAULT_WORKSPACE_ID:
                self._workspaces[workspace.id] = workspace
        for session_id, generation in change.generations:
            self._generations[session_id] = max(generation, self._generations.get(session_id, 0))

    def put(self, record: SessionRecord) -> SessionRecord:
        """Hold one written (or being written) record; returns it as held, kind and children derived.

        A record read from the table and changed (``replace``/``evolved``) already carries the
        right kind and children, so the common case stores the given object without a copy.
        """
        children = tuple(self._children.get(record.id, ()))
        if record.children != children:
            record = replace(record, children=children)
        record = with_kind(record)
        is_new = record.id not in self._records
        self._records[record.id] = record
        if is_new and record.parent_id is not None:
            siblings = self._children.setdefault(record.parent_id, [])
            if record.id not in siblings:
                siblings.append(record.id)
                self._refresh_children(record.parent_id)
        return record

    def _remove(self, session_id: str) -> None:
        record = self._records.pop(session_id, None)
        if record is not None and record.parent_id is not None:
            siblings = self._children.get(record.parent_id)
            if siblings is not None and session_id in siblings:
                siblings.remove(session_id)
                if not siblings:
                    del self._children[record.parent_id]
                self._refresh_children(record.parent_id)

    def _refresh_children(self, parent_id: str) -> None:
        """Rebuild the held parent record with its current children (when the parent is held)."""
        parent = self._records.get(parent_id)
        if parent is not None:
            self._records[parent_id] = replace(parent, children=tuple(self._children.get(parent_id, ())))

