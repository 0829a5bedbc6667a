"""Creating and filing sessions: create, create_child, ensure (SM-4, SM-5, SM-6, SM-8, SM-19)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

from core.errors import Conflict, InvalidInput, NotFound
from core.sessions import rules
from core.sessions.fields import SessionCreation, SessionFields, session_fields_from
from core.sessions.ports import StoreChange
from core.sessions.records import DEFAULT_WORKSPACE_ID, SessionRecord, WorkBinding
from core.sessions.writer import PendingEvent, SessionWriter, event_payload

log = logging.getLogger(__name__)


class SessionCreator:
    """Makes new records (roots, children, records filed by id) and backfills created_from."""

    def __init__(self, writer: SessionWriter, new_id: Callable[[], str]) -> None:
        self._writer = writer
        self._table = writer.table
        self._new_id = new_id

    async def create_session(
        self,
        fields: SessionFields | Mapping[str, object] | None = None,
        creation: SessionCreation | None = None,
    ) -> SessionRecord:
        """Create a root (or, with ``parent_id``, a child of an existing parent); emits session.created."""
        given = session_fields_from(fields)
        if given.parent_id is not None and creation is not None:
            raise InvalidInput("the creation argument is for root sessions only; a child takes its root's")
        session_id = given.id or self._new_id()
        self._refuse_while_deleting(session_id, given.parent_id)
        written: asyncio.Future[None] | None = None
        async with self._writer.mutation():
            if session_id in self._table:
                raise Conflict(f"session {session_id!r} already exists")
            if given.parent_id is not None:
                parent = self._table.raw(given.parent_id)
                if parent is None:
                    raise NotFound(f"parent session {given.parent_id!r} does not exist")
                await self._add_child(session_id, parent, given, ())
            else:
                # A new root touches no other record: install it now and write it outside the
                # writer lock, so filing many new sessions at once shares group transactions.
                written = self._writer.apply_behind(self._new_root(session_id, given, creation))
        return await self._created(session_id, written)

    async def create_child_session(
        self, parent_id: str, fields: SessionFields | Mapping[str, object] | None = None
    ) -> SessionRecord:
        """SM-34: create a child; a parent not in the table is first filed by id (an unfiled root)."""
        given = replace(session_fields_from(fields), parent_id=parent_id)
        session_id = given.id or self._new_id()
        self._refuse_while_deleting(session_id, parent_id)
        async with self._writer.mutation():
            if session_id in self._table:
                raise Conflict(f"session {session_id!r} already exists")
            parent = self._table.raw(parent_id)
            filed: tuple[SessionRecord, ...] = ()
            if parent is None:
                now = self._writer.now()
                parent = SessionRecord(id=parent_id, created_at=now, updated_at=now)
                filed = (parent,)
            await self._add_child(session_id, parent, given, filed)
        return self._current(session_id)

    async def ensure_session(
        self,
        session_id: str,
        patch: SessionFields | Mapping[str, object] | None = None,
        creation: SessionCreation | None = None,
    ) -> SessionRecord:
        """File ``session_id`` when missing (with ``patch``); an existing unfiled root gets created_from (SM-4)."""
        given = replace(session_fields_from(patch), id=session_id)
        if given.parent_id is not None and creation is not None:
            raise InvalidInput("the creation argument is for root sessions only; a child takes its root's")
        await self._writer.wait_for_deletion(session_id)
        written: asyncio.Future[None] | None = None
        async with self._writer.mutation():
            existing = self._table.raw(session_id)
            if existing is not None:
                if creation is not None and existing.parent_id is None and rules.is_unfiled(existing):
                    self._check_created_from(creation)
                    backfilled = replace(existing, created_from=creation.created_from, updated_at=self._writer.now())
                    event = PendingEvent(session_id, "session.updated", {"change": "created_from_backfilled"})
                    await self._writer.apply(StoreChange(sessions=(backfilled,)), [event])
            elif given.parent_id is not None:
                parent = self._table.raw(given.parent_id)
                if parent is None:
                    raise NotFound(f"parent session {given.parent_id!r} does not exist")
                await self._add_child(session_id, parent, given, ())
            else:
                # A new root touches no other record: install it now and write it outside the
                # writer lock, so filing many new sessions at once shares group transactions.
                written = self._writer.apply_behind(self._new_root(session_id, given, creation))
        return await self._created(session_id, written)

    async def _created(self, session_id: str, written: asyncio.Future[None] | None) -> SessionRecord:
        """After a new root was installed by ``apply_behind``: await its write, then emit session.created."""
        if written is not None:
            try:
                await asyncio.shield(written)
            except Exception as exc:
                log.warning("session %s filed but not persisted yet (%r); its next write carries it", session_id, exc)
            await self._writer.emit(session_id, "session.created", event_payload(self._current(session_id)))
        return self._current(session_id)

    def _refuse_while_deleting(self, session_id: str, parent_id: str | None) -> None:
        for busy in (session_id, parent_id):
            if busy is not None and self._writer.is_deleting(busy):
                raise Conflict(f"session {busy!r} is being deleted")

    @staticmethod
    def _check_created_from(creation: SessionCreation) -> None:
        if not creation.created_from:
            raise InvalidInput("created_from must name the surface that created the session")

    def _checked_binding(self, creation: SessionCreation | None) -> tuple[str | None, WorkBinding | None]:
        """SM-5: validate workspace and binding; the default workspace is not stored."""
        if creation is None:
            return None, None
        self._check_created_from(creation)
        workspace_id = creation.workspace
        if workspace_id in (None, DEFAULT_WORKSPACE_ID):
            if creation.work is not None:
                raise InvalidInput("a session in the default workspace cannot have a work binding")
            return None, None
        assert workspace_id is not None
        workspace = self._table.workspace(workspace_id)
        if workspace is None:
            raise NotFound(f"workspace {workspace_id!r} does not exist")
        if workspace.root is not None and (creation.work is None or not creation.work.root):
            raise InvalidInput(f"a session in project workspace {workspace_id!r} needs work.root")
        return workspace_id, creation.work

    def _new_root(self, session_id: str, given: SessionFields, creation: SessionCreation | None) -> SessionRecord:
        workspace, work = self._checked_binding(creation)
        now = self._writer.now()
        record = SessionRecord(
            id=session_id,
            created_at=now,
            updated_at=now,
            status=given.status or "active",
            name=given.name,
            title=given.title,
            input_context=given.input_context,
            result=given.result,
            metadata=dict(given.metadata),
            created_from=creation.created_from if creation is not None else None,
            workspace=workspace,
            work=work,
        )
        return record

    async def _add_child(
        self, session_id: str, parent: SessionRecord, given: SessionFields, filed: tuple[SessionRecord, ...]
    ) -> None:
        if self._writer.is_deleting(parent.id):
            raise Conflict(f"session {parent.id!r} is being deleted")
        now = self._writer.now()
        child = SessionRecord(
            id=session_id,
            created_at=now,
            updated_at=now,
            parent_id=parent.id,
            status=given.status or "active",
            name=given.name,
            title=given.title,
            input_context=given.input_context,
            result=given.result,
            metadata=dict(given.metadata),
            current_dir=parent.current_dir,  # SM-6: copied once, then independent
        )
        events = [PendingEvent(p.id, "session.created") for p in filed]
        events += [
            PendingEvent(session_id, "session.created"),
            PendingEvent(parent.id, "session.updated", {"change": "child_created", "child_id": session_id}),
        ]
        await self._writer.apply(StoreChange(sessions=(*filed, child)), events)

    def _current(self, session_id: str) -> SessionRecord:
        record = self._table.get(session_id)
        if record is None:
            raise NotFound(f"session {session_id!r} does not exist")
        return record
