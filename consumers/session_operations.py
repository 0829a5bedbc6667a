"""The session-area control operations: sessions, memory, take, places, workspaces, platforms.

Each operation is a request model from ``schemas.control`` plus a thin call
into the session manager; results are the ``schemas.control`` result models.
Refusals are ``TurnstileError``s (``invalid``, ``not_found``, ``conflict``)
and everything a request can get wrong is checked before anything is written.
Turn and knowledge operations are in ``consumers.turn_operations``, ``answer.lookup`` in
``consumers.answer_operations``; ``consumers.catalog`` binds every area to the parts it uses.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from consumers.api import Operation
from consumers.paging import paginate
from consumers.rendering import Rendering
from consumers.shared_state import SharedState
from core.errors import InvalidInput, NotFound
from core.sessions.fields import SessionCreation
from core.sessions.manager import SessionManager
from core.sessions.platforms import AdapterInstance
from core.sessions.records import (
    DEFAULT_WORKSPACE_KEY,
    SessionRecord,
    TakeSettings,
    WorkBinding,
)
from core.sessions.take import Principal
from schemas.control import (
    AdapterInstanceOut,
    CreationIn,
    DeletedOut,
    GenerationOut,
    MemoryClearOut,
    MemoryClearRequest,
    PageRequest,
    PlaceGetRequest,
    PlaceOfOut,
    PlaceOut,
    PlaceUpdateRequest,
    PlatformRegisterRequest,
    PlatformUnregisteredOut,
    PlatformUnregisterRequest,
    SessionChildrenRequest,
    SessionCompleteRequest,
    SessionCreateChildRequest,
    SessionCreateRequest,
    SessionCurrentDirRequest,
    SessionEnsureRequest,
    SessionExtraRootsRequest,
    SessionIdRequest,
    SessionListRequest,
    SessionOut,
    SessionTakeSettingsRequest,
    SessionTitleRequest,
    SessionUpdateRequest,
    SessionWorktreeRequest,
    TakeCheckRequest,
    TakeVerdictOut,
    WorkspaceAddedOut,
    WorkspaceAddRequest,
    WorkspaceIdRequest,
    WorkspaceOut,
    WorkspaceRemovedOut,
)
from schemas.wire import Page

log = logging.getLogger(__name__)

HISTORY_TYPE = "context"


def _creation(given: CreationIn | None) -> SessionCreation | None:
    if given is None:
        return None
    work = None
    if given.work is not None:
        work = WorkBinding(given.work.root, tuple(given.work.extra_roots), tuple(given.work.worktrees))
    return SessionCreation(created_from=given.created_from, workspace=given.workspace, work=work)


def _instance_out(instance: AdapterInstance) -> AdapterInstanceOut:
    return AdapterInstanceOut(
        instance_id=instance.instance_id,
        platform=instance.platform,
        type=instance.type,
        claims=list(instance.claims),
        chat_scopes=dict(instance.chat_scopes),
    )


def real_directory(root: str) -> str:
    """SM-29's validation point: ``root`` must be an absolute path to an existing directory; its real path."""
    if "\x00" in root or not os.path.isabs(root):
        raise InvalidInput(f"workspace root {root!r} must be an absolute path")
    real = os.path.realpath(root)
    if not os.path.isdir(real):
        raise InvalidInput(f"workspace root {root!r} is not an existing directory")
    return real


def _creation_order(record: SessionRecord) -> tuple[float, str]:
    return (record.created_at, record.id)


Budget = Callable[[], int]


def session_operations(
    manager_: SessionManager, render: Rendering, budget_bytes: Budget, shared: SharedState
) -> list[Operation]:
    """session.*: create, create_child, ensure, get, list, children, update, title, complete, delete, …"""

    def manager() -> SessionManager:
        return manager_

    def existing(session_id: str) -> SessionRecord:
        record = manager().get_session(session_id)
        if record is None:
            raise NotFound(f"session {session_id!r} does not exist")
        return record

    async def create(req: SessionCreateRequest) -> SessionOut:
        return render.session(await manager().create_session(req.fields.sent(), _creation(req.creation)))

    async def create_child(req: SessionCreateChildRequest) -> SessionOut:
        fields = req.fields.sent()
        given_parent = fields.pop("parent_id", None)
        if given_parent is not None and given_parent != req.parent_id:
            raise InvalidInput("fields.parent_id differs from parent_id")
        await shared.read_through(req.parent_id)
        return render.session(await manager().create_child_session(req.parent_id, fields))

    async def ensure(req: SessionEnsureRequest) -> SessionOut:
        fields = req.fields.sent()
        given_id = fields.pop("id", None)
        if given_id is not None and given_id != req.session_id:
            raise InvalidInput("fields.id differs from session_id")
        await shared.read_through(req.session_id)
        return render.session(await manager().ensure_session(req.session_id, fields, _creation(req.creation)))

    async def get(req: SessionIdRequest) -> SessionOut:
        await shared.read_through(req.session_id)
        return render.session(existing(req.session_id))

    def paged(records: list[SessionRecord], req: PageRequest) -> Page[SessionOut]:
        return paginate(
            records, _creation_order, render.session, limit=req.limit, cursor=req.cursor,
            budget_bytes=budget_bytes(),
        )

    async def list_(req: SessionListRequest) -> Page[SessionOut]:
        m = manager()
        if req.parent_id is not None and req.roots_only:
            raise InvalidInput("give parent_id or roots_only, not both")
        if req.parent_id is not None:
            return paged(m.list_sessions(parent_id=req.parent_id, status=req.status), req)
        if req.roots_only:
            return paged(m.list_sessions(parent_id=None, status=req.status), req)
        return paged(m.list_sessions(status=req.status), req)

    async def children(req: SessionChildrenRequest) -> Page[SessionOut]:
        existing(req.session_id)
        return paged(manager().get_children(req.session_id), req)

    async def update(req: SessionUpdateRequest) -> SessionOut:
        return render.session(await manager().update_session(req.session_id, req.changes.sent()))

    async def title(req: SessionTitleRequest) -> SessionOut:
        return render.session(await manager().update_session_title(req.session_id, req.title))

    async def complete(req: SessionCompleteRequest) -> SessionOut:
        return render.session(await manager().complete_session(req.session_id, req.result))

    async def delete(req: SessionIdRequest) -> DeletedOut:
        m = manager()
        if m.get_session(req.session_id) is None and not m.is_deleting(req.session_id):
            raise NotFound(f"session {req.session_id!r} does not exist")
        deleted = await m.delete_session(req.session_id)
        return DeletedOut(session_id=req.session_id, deleted=deleted, generation=m.generation_of(req.session_id))

    async def generation(req: SessionIdRequest) -> GenerationOut:
        return GenerationOut(session_id=req.session_id, generation=manager().generation_of(req.session_id))

    async def set_current_dir(req: SessionCurrentDirRequest) -> SessionOut:
        return render.session(await manager().set_current_dir(req.session_id, req.current_dir))

    async def set_extra_roots(req: SessionExtraRootsRequest) -> SessionOut:
        return render.session(await manager().set_extra_roots(req.session_id, req.extra_roots))

    async def add_worktree(req: SessionWorktreeRequest) -> SessionOut:
        return render.session(await manager().add_worktree(req.session_id, req.path))

    async def take_settings(req: SessionTakeSettingsRequest) -> SessionOut:
        settings = None if req.settings is None else TakeSettings(**req.settings.model_dump())
        return render.session(await manager().update_take_settings(req.session_id, settings))

    op = _binder("session")
    return [
        op("create", SessionCreateRequest, create, "create a root (or a child via fields.parent_id)"),
        op("create_child", SessionCreateChildRequest, create_child, "create a child session"),
        op("ensure", SessionEnsureRequest, ensure, "file a session by id when missing"),
        op("get", SessionIdRequest, get, "one session record"),
        op("list", SessionListRequest, list_, "session records, filtered, paged"),
        op("children", SessionChildrenRequest, children, "the children of a session, paged"),
        op("update", SessionUpdateRequest, update, "change fields; metadata merges"),
        op("title", SessionTitleRequest, title, "set the title"),
        op("complete", SessionCompleteRequest, complete, "mark completed with a result"),
        op("delete", SessionIdRequest, delete, "delete a session and its subtree"),
        op("generation", SessionIdRequest, generation, "the session's generation"),
        op("set_current_dir", SessionCurrentDirRequest, set_current_dir, "set the session's current directory"),
        op("set_extra_roots", SessionExtraRootsRequest, set_extra_roots, "replace the project's extra roots"),
        op("add_worktree", SessionWorktreeRequest, add_worktree, "add a worktree to the project binding"),
        op("take_settings", SessionTakeSettingsRequest, take_settings, "set the per-session take settings"),
    ]


def other_operations(
    manager_: SessionManager,
    render: Rendering,
    budget_bytes: Budget,
    clear_history: Callable[[str], Awaitable[bool]],
    shared: SharedState,
) -> list[Operation]:
    """memory.clear, take.check, place.*, workspace.*, platform.*."""

    def manager() -> SessionManager:
        return manager_

    async def memory_clear(req: MemoryClearRequest) -> MemoryClearOut:
        m = manager()
        if m.get_session(req.session_id) is None:
            raise NotFound(f"session {req.session_id!r} does not exist")
        clears_history = req.types is None or HISTORY_TYPE in req.types
        cleared = False
        if clears_history:
            # SM-23: scope `session` clears this session's history; scope `all` clears every
            # session's (the children go below either way, so only roots and this one are cleared).
            targets = [req.session_id]
            if req.scope == "all":
                targets += [r.id for r in m.list_sessions() if r.parent_id is None and r.id != req.session_id]
            cleared = all([await clear_history(target) for target in targets])
        deleted = await m.memory_clear(req.session_id, req.types, req.scope, history_cleared=cleared)
        return MemoryClearOut(session_id=req.session_id, history_cleared=cleared, deleted=deleted)

    async def take_check(req: TakeCheckRequest) -> TakeVerdictOut:
        who = Principal(req.principal.platform, req.principal.user_id) if req.principal is not None else None
        await shared.read_through(req.current_id, req.target_id)
        verdict = manager().can_take(req.current_id, req.target_id, who)
        reason = render.label(verdict.reason) if verdict.reason is not None else None
        return TakeVerdictOut(ok=verdict.ok, reason=reason)

    async def place_of(req: SessionIdRequest) -> PlaceOfOut:
        m = manager()
        await shared.read_through(req.session_id)
        where = m.place_of(req.session_id)
        record = m.get_place(where.key)
        place = render.place(record) if record is not None else None
        return PlaceOfOut(session_id=req.session_id, kind=where.kind, key=where.key, place=place)

    async def place_get(req: PlaceGetRequest) -> PlaceOut:
        record = manager().get_place(req.key)
        if record is None:
            raise NotFound(f"place {req.key!r} does not exist")
        return render.place(record)

    async def place_list(req: PageRequest) -> Page[PlaceOut]:
        return paginate(
            manager().list_places(), lambda p: (p.key != DEFAULT_WORKSPACE_KEY, p.key), render.place,
            limit=req.limit, cursor=req.cursor, budget_bytes=budget_bytes(),
        )

    # Shared database: one process at a time, on records read through (no lost merge, one workspace per root).
    async def place_update(req: PlaceUpdateRequest) -> PlaceOut:
        async with shared.directory_writes():
            return render.place(await manager().update_place(req.key, req.metadata))

    async def workspace_add(req: WorkspaceAddRequest) -> WorkspaceAddedOut:
        real = await asyncio.to_thread(real_directory, req.root)
        async with shared.directory_writes():
            added = await manager().add_workspace(real)
        return WorkspaceAddedOut(workspace=render.workspace(added.workspace), existed=added.existed)

    async def workspace_list(req: PageRequest) -> Page[WorkspaceOut]:
        return paginate(
            manager().list_workspaces(), lambda w: (w.position, w.id), render.workspace,
            limit=req.limit, cursor=req.cursor, budget_bytes=budget_bytes(),
        )

    async def workspace_remove(req: WorkspaceIdRequest) -> WorkspaceRemovedOut:
        async with shared.directory_writes():
            changed = await manager().remove_workspace(req.workspace_id)
        return WorkspaceRemovedOut(workspace_id=req.workspace_id, changed_sessions=changed)

    async def platform_register(req: PlatformRegisterRequest) -> AdapterInstanceOut:
        instance = AdapterInstance(
            instance_id=req.instance_id,
            platform=req.platform,
            type=req.type,
            claims=tuple(req.claims),
            chat_scopes=dict(req.chat_scopes),
        )
        await shared.register_platform(instance)  # persisted: every process and a restart see it
        return _instance_out(instance)

    async def platform_unregister(req: PlatformUnregisterRequest) -> PlatformUnregisteredOut:
        existed = await shared.unregister_platform(req.instance_id)
        if not existed:
            raise NotFound(f"adapter instance {req.instance_id!r} is not registered")
        return PlatformUnregisteredOut(instance_id=req.instance_id, existed=True)

    async def platform_list(req: PageRequest) -> Page[AdapterInstanceOut]:
        return paginate(
            manager().registry.instances(), lambda i: (i.instance_id,), _instance_out,
            limit=req.limit, cursor=req.cursor, budget_bytes=budget_bytes(),
        )

    return [
        Operation("memory", "clear", MemoryClearRequest, memory_clear, "clear memory; history clear deletes children"),
        Operation("take", "check", TakeCheckRequest, take_check, "may one session take from another"),
        Operation("place", "of", SessionIdRequest, place_of, "where a session belongs"),
        Operation("place", "get", PlaceGetRequest, place_get, "one place record"),
        Operation("place", "list", PageRequest, place_list, "every place record, paged"),
        Operation("place", "update", PlaceUpdateRequest, place_update, "merge a place's metadata"),
        Operation("workspace", "add", WorkspaceAddRequest, workspace_add, "register a directory as a workspace"),
        Operation("workspace", "list", PageRequest, workspace_list, "every workspace, default first, paged"),
        Operation("workspace", "remove", WorkspaceIdRequest, workspace_remove, "remove a workspace"),
        Operation("platform", "register", PlatformRegisterRequest, platform_register, "add an adapter instance"),
        Operation("platform", "unregister", PlatformUnregisterRequest, platform_unregister, "remove an adapter"),
        Operation("platform", "list", PageRequest, platform_list, "the adapter instances, paged"),
    ]


def _binder(resource: str) -> Callable[..., Operation]:
    def bind(verb: str, request: Any, call: Any, summary: str) -> Operation:
        return Operation(resource, verb, request, call, summary)

    return bind
