"""SessionManager: the session tree, its places and take rules, persisted and evented (seed 003).

Reads are synchronous over the in-memory table loaded at ``start()``; every
write goes repository first, then table, then events (see ``writer.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from enum import Enum
from typing import Final

from core.errors import InvalidInput, NotFound
from core.sessions import rules, take
from core.sessions.creation import SessionCreator
from core.sessions.directory import AddedWorkspace, PlaceDirectory
from core.sessions.fields import (
    SessionCreation,
    SessionFields,
    SessionUpdate,
    session_update_from,
)
from core.sessions.incoming_message import IncomingMessage
from core.sessions.places import default_workspace_place, merged_metadata
from core.sessions.platforms import OwnerIdentities, PlatformRegistry
from core.sessions.ports import ClearSessionData, EventSink, SessionRepository, StoreChange
from core.sessions.recording import InboundRecorder
from core.sessions.records import (
    DEFAULT_WORKSPACE_KEY,
    JsonObject,
    OriginChat,
    PlaceRecord,
    SessionPlace,
    SessionRecord,
    SessionStatus,
    TakeSettings,
    WorkspaceRecord,
)
from core.sessions.table import SessionTable
from core.sessions.turn_ledger import TurnLedger
from core.sessions.writer import PendingEvent, SessionWriter, event_payload

log = logging.getLogger(__name__)


class ParentFilter(Enum):
    """``list_sessions(parent_id=ANY_PARENT)``: do not filter by parent."""

    ANY = "any"


ANY_PARENT: Final = ParentFilter.ANY
MEMORY_CLEAR_SCOPES: Final = ("session", "all")
# Sessions of a deleted subtree whose session.deleted events and data clear go together: large
# enough that a 2,500-session subtree is cleared in ~40 steps, small enough that one step holds the
# event loop for a few milliseconds only (other sessions' turns run between steps).
DELETION_CHUNK: Final = 64


class SessionManager:
    """The session manager service: records, tree, deletion and generations, places, take rules.

    Construct with a repository and an event sink; optionally the platform
    registry (default: empty, so every platform is its own claimant), the owner
    identities (None = no authority), the data-clear hook run after
    ``session.deleted``, a clock and an id factory. Call ``start()`` before use.
    """

    def __init__(
        self,
        repository: SessionRepository,
        events: EventSink,
        *,
        registry: PlatformRegistry | None = None,
        owners: OwnerIdentities | None = None,
        clear_session_data: ClearSessionData | None = None,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.registry = registry if registry is not None else PlatformRegistry()
        self.owners = owners
        self._repository = repository
        self._clear_session_data = clear_session_data
        self._new_id = new_id
        self._table = SessionTable()
        self._writer = SessionWriter(self._table, repository, events, clock)
        is_owner = owners.is_owner if owners is not None else None
        self._is_owner: rules.IsOwner | None = is_owner
        self._recorder = InboundRecorder(self._writer, self.registry, is_owner)
        self._directory = PlaceDirectory(self._writer, lambda: new_id()[:16])
        self._turns = TurnLedger(self._writer)
        self._creator = SessionCreator(self._writer, new_id)
        self._reported: set[tuple[str, str]] = set()
        self._started = False

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Load every record and make sure the default workspace's place record exists."""
        self._table.load(await self._repository.load())
        self._started = True
        if self._table.place(DEFAULT_WORKSPACE_KEY) is None:
            async with self._writer.mutation():
                await self._writer.apply(StoreChange(places=(default_workspace_place(self._writer.now()),)))

    async def install_external(
        self, read: Callable[[], Awaitable[StoreChange | None]], session_ids: set[str] | None = None
    ) -> None:
        """Install what another process wrote (PostgreSQL shared by processes, ``core.store.change_feed``).

        ``read`` reads the changed rows back as a ``StoreChange`` (None: reload everything); it runs
        under the writer lock once this process's own pending writes of ``session_ids`` (None: all)
        landed, so nothing it reads is overtaken by an older local write. No events: the writer emitted them.
        """
        async with self._writer.mutation():
            await self._writer.settle_behind(session_ids)
            change = await read()
            if change is None:
                self._table.load(await self._repository.load())
            else:
                self._table.install(change)

    async def reload(self) -> None:
        """Read every record again (partitioned ownership: sessions taken over from another process)."""

        async def everything() -> StoreChange | None:
            return None

        await self.install_external(everything)

    def set_clear_session_data(self, hook: ClearSessionData | None) -> None:
        """Register the hook that clears a deleted session's history and per-session data."""
        self._clear_session_data = hook

    async def drain(self) -> None:
        """Wait for background work (display-name refreshes, in-flight recordings)."""
        await self._recorder.drain()

    # -- reads (synchronous) ---------------------------------------------------

    def get_session(self, session_id: str) -> SessionRecord | None:
        """SM-34: the record, or None."""
        return self._table.get(session_id)

    def list_sessions(
        self, parent_id: str | ParentFilter | None = ANY_PARENT, status: SessionStatus | None = None
    ) -> list[SessionRecord]:
        """SM-34: all records, or the children of ``parent_id`` (None = roots), optionally by status."""
        if isinstance(parent_id, ParentFilter):
            return self._table.filtered(None, False, status)
        return self._table.filtered(parent_id, True, status)

    def subtree(self, session_id: str) -> list[str]:
        """``session_id`` and all its descendants, parents before children (nothing when unknown)."""
        return self._table.subtree(session_id)

    def get_children(self, parent_id: str) -> list[SessionRecord]:
        """SM-34: the children of ``parent_id`` in creation order."""
        return [c for c in (self._table.get(i) for i in self._table.child_ids(parent_id)) if c is not None]

    def generation_of(self, session_id: str) -> int:
        """SM-22: the session's generation; compare only for equality."""
        return self._table.generation(session_id)

    def is_deleting(self, session_id: str) -> bool:
        """Is a deletion of ``session_id`` in progress?"""
        return self._writer.is_deleting(session_id)

    def place_of(self, session_id: str) -> SessionPlace:
        """SM-27: the session's place, judged on its root."""
        return rules.place_of(
            session_id, self._table.raw, self._is_owner, self._table.workspace_ids(), self._report_once
        )

    def get_place(self, key: str) -> PlaceRecord | None:
        """SM-28: the place record under ``key``."""
        return self._table.place(key)

    def list_places(self) -> list[PlaceRecord]:
        """SM-28: every place record, the default workspace first, then by key."""
        return self._table.places()

    def list_workspaces(self) -> list[WorkspaceRecord]:
        """SM-30: the default workspace, then the others in registration order."""
        return self._table.workspaces()

    def room_class(self, session_id: str) -> rules.RoomClass:
        """SM-9: who is in the session's audience."""
        is_owner = self._is_owner or (lambda _p, _u: False)
        return rules.room_class(self._table.raw(session_id), self._table.raw, is_owner)

    def origin_chat_of(self, session_id: str) -> OriginChat | None:
        """SM-10: the root's origin chat, or None."""
        return rules.origin_chat_of(session_id, self._table.raw)

    def from_elsewhere(self, message: IncomingMessage) -> bool:
        """SM-11: did the message enter through another platform than the room's origin?"""
        return rules.from_elsewhere(message, self._table.raw)

    def can_take(self, current_id: str, target_id: str, principal: take.Principal | None = None) -> take.TakeVerdict:
        """SM-24: may ``current_id`` take from ``target_id``? Synchronous; never raises."""
        try:
            return take.can_take(
                current_id,
                target_id,
                principal,
                lookup=self._table.raw,
                is_owner=self._is_owner,
                declared_one_to_one=self._declared_one_to_one,
            )
        except Exception:
            log.exception("can_take(%s, %s) failed; answering unknown", current_id, target_id)
            return take.deny(take.TAKE_UNKNOWN)

    def _declared_one_to_one(self, root: SessionRecord) -> bool:
        if root.origin_platform is None or root.origin_chat is None:
            return False
        return self.registry.is_declared_one_to_one(root.origin_platform, root.origin_chat.type)

    def _report_once(self, session_id: str, problem: str) -> None:
        if (session_id, problem) not in self._reported:
            self._reported.add((session_id, problem))
            log.warning("session %s: %s", session_id, problem)

    # -- creation --------------------------------------------------------------

    async def create_session(
        self,
        fields: SessionFields | Mapping[str, object] | None = None,
        creation: SessionCreation | None = None,
    ) -> SessionRecord:
        """Create a root (or, with ``parent_id``, a child of an existing parent); emits session.created."""
        return await self._creator.create_session(fields, creation)

    async def create_child_session(
        self, parent_id: str, fields: SessionFields | Mapping[str, object] | None = None
    ) -> SessionRecord:
        """SM-34: create a child; a parent not in the table is first filed by id (an unfiled root)."""
        return await self._creator.create_child_session(parent_id, fields)

    async def ensure_session(
        self,
        session_id: str,
        patch: SessionFields | Mapping[str, object] | None = None,
        creation: SessionCreation | None = None,
    ) -> SessionRecord:
        """File ``session_id`` when missing (with ``patch``); an existing unfiled root gets created_from (SM-4)."""
        return await self._creator.ensure_session(session_id, patch, creation)

    # -- changes ---------------------------------------------------------------

    async def update_session(self, session_id: str, update: SessionUpdate | Mapping[str, object]) -> SessionRecord:
        """SM-20: change fields; metadata merges (top-level keys replaced whole); emits session.updated."""
        change = session_update_from(update)
        async with self._writer.mutation():
            record = self._existing(session_id)
            changed = replace(
                record,
                name=change.name if change.name is not None else record.name,
                title=change.title if change.title is not None else record.title,
                status=change.status or record.status,
                input_context=change.input_context if change.input_context is not None else record.input_context,
                result=change.result if change.result is not None else record.result,
                metadata=merged_metadata(record.metadata, change.metadata or {}),
                updated_at=self._writer.now(),
            )
            await self._writer.apply(StoreChange(sessions=(changed,)), [PendingEvent(session_id, "session.updated")])
        return self._current(session_id)

    async def update_session_title(self, session_id: str, title: str) -> SessionRecord:
        """SM-34: set the title; emits session.updated."""
        return await self.update_session(session_id, SessionUpdate(title=title))

    async def update_take_settings(self, session_id: str, settings: TakeSettings | None) -> SessionRecord:
        """Set the session's take settings (None = use the root's, else the default)."""
        async with self._writer.mutation():
            record = self._existing(session_id)
            changed = replace(record, take_settings=settings, updated_at=self._writer.now())
            await self._writer.apply(StoreChange(sessions=(changed,)), [PendingEvent(session_id, "session.updated")])
        return self._current(session_id)

    async def complete_session(self, session_id: str, result: str | None = None) -> SessionRecord:
        """SM-33: status completed, result stored; emits session.completed."""
        async with self._writer.mutation():
            record = self._existing(session_id)
            changed = replace(
                record,
                status="completed",
                result=result if result is not None else record.result,
                updated_at=self._writer.now(),
            )
            extra: JsonObject = {"result": changed.result}
            await self._writer.apply(
                StoreChange(sessions=(changed,)), [PendingEvent(session_id, "session.completed", extra)]
            )
        return self._current(session_id)

    # -- deletion --------------------------------------------------------------

    async def delete_session(self, session_id: str) -> list[str]:
        """SM-21, SM-22: delete the subtree; returns the deleted ids, parents first.

        Synchronously at the start (before any await) every id of the subtree
        gets a new generation, parents before children, and new inbound for
        them starts waiting. Then the rows go (with the generations, in one
        write) and out of the table; then per session, children first,
        ``session.deleted`` and the data clear; then the parent's update.
        """
        if self._writer.is_deleting(session_id):
            await self._writer.wait_for_deletion(session_id)
            return []
        subtree = self._table.subtree(session_id)
        if not subtree:
            raise NotFound(f"session {session_id!r} does not exist")
        generations = tuple((sid, self._table.bump_generation(sid)) for sid in subtree)
        done = self._writer.mark_deleting(subtree)
        try:
            removed = [r for r in (self._table.get(sid) for sid in subtree) if r is not None]
            parent_id = removed[0].parent_id
            async with self._writer.mutation():
                await self._writer.apply(StoreChange(deleted_sessions=tuple(subtree), generations=generations))
            # SM-22: a reply checked against the old generation just before the bump may still be
            # in flight; streams store independently of the connection's order, so the first
            # session.deleted waits until everything sent before now is stored. Once, not per
            # chunk: whatever is sent after the bump is refused by its generation.
            await self._writer.stored_so_far()
            # A chunk at a time, children first: its session.deleted events stored (acks awaited
            # together), then its data cleared in one go; the loop yields between chunks.
            children_first = removed[::-1]
            for start in range(0, len(children_first), DELETION_CHUNK):
                chunk = children_first[start : start + DELETION_CHUNK]
                await self._writer.emit_all([
                    (r.id, "session.deleted", event_payload(r, {"generation": self._table.generation(r.id)}))
                    for r in chunk
                ])
                await self._clear([r.id for r in chunk])
            parent = self._table.get(parent_id) if parent_id is not None else None
            if parent is not None:
                extra: JsonObject = {"change": "child_deleted", "child_id": session_id}
                await self._writer.emit(parent.id, "session.updated", event_payload(parent, extra))
        finally:
            self._writer.unmark_deleting(subtree, done)
        return subtree

    async def _clear(self, session_ids: Sequence[str]) -> None:
        if self._clear_session_data is None:
            return
        try:
            await self._clear_session_data(session_ids)
        except Exception:
            log.exception("clearing the data of deleted sessions %s failed", ", ".join(session_ids[:5]))

    async def memory_clear(
        self,
        session_id: str,
        types: Sequence[str] | None = None,
        scope: str = "session",
        history_cleared: bool = True,
    ) -> list[str]:
        """SM-23: after a history clear, delete children (scope ``session``) or every child (``all``).

        Only when ``types`` is None or includes ``context`` and the history clear
        succeeded; returns the deleted ids.
        """
        if scope not in MEMORY_CLEAR_SCOPES:
            raise InvalidInput("memory clear scope must be 'session' or 'all'")
        if not history_cleared or (types is not None and "context" not in types):
            return []
        if scope == "session":
            targets = self._table.child_ids(session_id)
        else:
            targets = [r.id for r in self._table.records() if r.parent_id is not None]
        deleted: list[str] = []
        for target in targets:
            if target in self._table and not self._writer.is_deleting(target):
                deleted += await self.delete_session(target)
        return deleted

    # -- inbound ---------------------------------------------------------------

    async def record_inbound(self, message: IncomingMessage) -> None:
        """SM-17: file or backfill from a native inbound; waits out a deletion; never raises."""
        await self._recorder.record(message)

    # -- places and workspaces ---------------------------------------------------

    async def set_current_dir(self, session_id: str, directory: str) -> SessionRecord:
        """SM-6: set this session's own current directory."""
        return await self._directory.set_current_dir(session_id, directory)

    async def set_extra_roots(self, session_id: str, extra_roots: Sequence[str]) -> SessionRecord:
        """SM-35: replace the project root's extra writable roots."""
        return await self._directory.set_extra_roots(session_id, extra_roots)

    async def add_worktree(self, session_id: str, path: str) -> SessionRecord:
        """SM-35: add a worktree to the project root's binding."""
        return await self._directory.add_worktree(session_id, path)

    async def update_place(self, key: str, metadata: JsonObject) -> PlaceRecord:
        """SM-28: merge metadata into a place record; unknown key → NotFound."""
        return await self._directory.update_place(key, metadata)

    async def add_workspace(self, root: str) -> AddedWorkspace:
        """SM-29: register a workspace for a real directory (existing one → existed=True)."""
        return await self._directory.add_workspace(root)

    async def remove_workspace(self, workspace_id: str) -> list[str]:
        """SM-31: remove a workspace; its sessions return to the default one. Returns changed ids."""
        return await self._directory.remove_workspace(workspace_id)

    # -- turn bookkeeping (fed by the session worker) ----------------------------

    async def turn_started(self, session_id: str) -> SessionRecord | None:
        """SM-16: a turn of the session started; None when the session does not exist."""
        return await self._turns.started(session_id)

    async def turn_ended(
        self, session_id: str, outcome: str | None, error: str | None = None, ended_at: float | None = None,
        usage: tuple[int, int] | None = None,
    ) -> SessionRecord | None:
        """SM-13, SM-14, SM-16: a turn ended (``outcome`` None = blocked, counts as silent); SM-15:
        ``usage`` (input, output tokens) is added in the same write and ``session.updated``."""
        return await self._turns.ended(session_id, outcome, error, ended_at, usage)

    def turn_started_behind(self, session_id: str) -> asyncio.Future[None] | None:
        """``turn_started`` without waiting: the future settles once the write and its
        ``session.updated`` are done (None: no such session). The worker's hot path."""
        return self._turns.started_behind(session_id)

    def turn_ended_behind(
        self, session_id: str, outcome: str | None, error: str | None = None, ended_at: float | None = None,
        usage: tuple[int, int] | None = None,
    ) -> asyncio.Future[None] | None:
        """``turn_ended`` without waiting (see ``turn_started_behind``)."""
        return self._turns.ended_behind(session_id, outcome, error, ended_at, usage)

    async def add_usage(self, session_id: str, input_tokens: int, output_tokens: int) -> SessionRecord | None:
        """SM-15: add the session's own model usage; unknown sessions are ignored (None)."""
        return await self._turns.usage(session_id, input_tokens, output_tokens)

    def running_turns(self, session_id: str) -> int:
        """How many turns of the session are running now."""
        return self._turns.running(session_id)

    # -- helpers -----------------------------------------------------------------

    def _existing(self, session_id: str) -> SessionRecord:
        record = self._table.raw(session_id)
        if record is None:
            raise NotFound(f"session {session_id!r} does not exist")
        return record

    def _current(self, session_id: str) -> SessionRecord:
        record = self._table.get(session_id)
        if record is None:
            raise NotFound(f"session {session_id!r} does not exist")
        return record
