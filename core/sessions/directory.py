"""Places and workspaces: update_place, add/remove workspace, and the binding setters (SM-28 … SM-31, SM-35)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePath

from core.errors import InvalidInput, NotFound
from core.sessions.places import detached_from_workspace, merged_metadata, new_workspace
from core.sessions.ports import StoreChange
from core.sessions.records import (
    DEFAULT_WORKSPACE_ID,
    JsonObject,
    PlaceRecord,
    SessionRecord,
    WorkBinding,
    WorkspaceRecord,
    workspace_place_key,
)
from core.sessions.writer import PendingEvent, SessionWriter


@dataclass(frozen=True)
class AddedWorkspace:
    """The answer of add_workspace: the workspace and whether it was already registered."""

    workspace: WorkspaceRecord
    existed: bool


def _unique(paths: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(paths))


class PlaceDirectory:
    """Writes place and workspace records and the work bindings of project roots."""

    def __init__(self, writer: SessionWriter, new_id: Callable[[], str]) -> None:
        self._writer = writer
        self._table = writer.table
        self._new_id = new_id

    def _root_binding(self, session_id: str) -> tuple[SessionRecord, WorkBinding]:
        root = self._table.root(session_id)
        if root is None:
            raise NotFound(f"session {session_id!r} (or its root) does not exist")
        if root.work is None:
            raise InvalidInput(f"session {session_id!r} is not a project session: its root has no work binding")
        return root, root.work

    async def set_current_dir(self, session_id: str, directory: str) -> SessionRecord:
        """SM-6: this session's own current directory."""
        if not directory:
            raise InvalidInput("current_dir must be a non-empty path")
        async with self._writer.mutation():
            record = self._table.raw(session_id)
            if record is None:
                raise NotFound(f"session {session_id!r} does not exist")
            changed = replace(record, current_dir=directory, updated_at=self._writer.now())
            await self._writer.apply(StoreChange(sessions=(changed,)), [PendingEvent(session_id, "session.updated")])
        return self._current(session_id)

    async def set_extra_roots(self, session_id: str, extra_roots: Sequence[str]) -> SessionRecord:
        """SM-35: replace the extra writable roots, written on the project session's root."""
        if any(not isinstance(p, str) or not p for p in extra_roots):
            raise InvalidInput("extra roots must be non-empty paths")
        async with self._writer.mutation():
            root, work = self._root_binding(session_id)
            changed = replace(root, work=replace(work, extra_roots=_unique(extra_roots)), updated_at=self._writer.now())
            await self._writer.apply(StoreChange(sessions=(changed,)), [PendingEvent(root.id, "session.updated")])
        return self._current(root.id)

    async def add_worktree(self, session_id: str, path: str) -> SessionRecord:
        """SM-35: record a worktree made for this tree, on the project session's root."""
        if not path:
            raise InvalidInput("a worktree path must be non-empty")
        async with self._writer.mutation():
            root, work = self._root_binding(session_id)
            changed = replace(root, work=replace(work, worktrees=_unique([*work.worktrees, path])))
            changed = replace(changed, updated_at=self._writer.now())
            await self._writer.apply(StoreChange(sessions=(changed,)), [PendingEvent(root.id, "session.updated")])
        return self._current(root.id)

    async def update_place(self, key: str, metadata: JsonObject) -> PlaceRecord:
        """SM-28: merge metadata into a place record (top-level keys replaced whole)."""
        async with self._writer.mutation():
            place = self._table.place(key)
            if place is None:
                raise NotFound(f"place {key!r} does not exist")
            changed = replace(
                place, metadata=merged_metadata(place.metadata, metadata), updated_at=self._writer.now()
            )
            await self._writer.apply(StoreChange(places=(changed,)))
        return changed

    async def add_workspace(self, root: str) -> AddedWorkspace:
        """SM-29: register a (caller-validated) real directory; the same path gives the existing one."""
        if not root or not PurePath(root).is_absolute():
            raise InvalidInput("a workspace root must be an absolute real path")
        async with self._writer.mutation():
            for existing in self._table.workspaces():
                if existing.root == root:
                    return AddedWorkspace(existing, existed=True)
            workspace, place = new_workspace(
                root, self._new_id(), self._table.next_workspace_position(), self._writer.now()
            )
            await self._writer.apply(StoreChange(workspaces=(workspace,), places=(place,)))
        return AddedWorkspace(workspace, existed=False)

    async def remove_workspace(self, workspace_id: str) -> list[str]:
        """SM-31: delete a workspace record and its place; detach its sessions. Returns changed ids.

        Roots that recorded it lose workspace and binding; current_dir is cleared
        in their whole trees; each changed session emits ``session.updated``.
        No files are touched.
        """
        if workspace_id == DEFAULT_WORKSPACE_ID:
            raise InvalidInput("the default workspace cannot be removed")
        async with self._writer.mutation():
            if self._table.workspace(workspace_id) is None:
                raise NotFound(f"workspace {workspace_id!r} does not exist")
            now = self._writer.now()
            changed: list[SessionRecord] = []
            for root in self._table.filtered(None, True, None):
                if root.workspace != workspace_id:
                    continue
                changed.append(detached_from_workspace(root, now))
                for member in self._table.subtree(root.id)[1:]:
                    record = self._table.raw(member)
                    if record is not None and record.current_dir is not None:
                        changed.append(replace(record, current_dir=None, updated_at=now))
            change = StoreChange(
                sessions=tuple(changed),
                deleted_workspaces=(workspace_id,),
                deleted_places=(workspace_place_key(workspace_id),),
            )
            events = [PendingEvent(r.id, "session.updated", {"change": "workspace_removed"}) for r in changed]
            await self._writer.apply(change, events)
        return [r.id for r in changed]

    def _current(self, session_id: str) -> SessionRecord:
        record = self._table.get(session_id)
        if record is None:
            raise NotFound(f"session {session_id!r} does not exist")
        return record
