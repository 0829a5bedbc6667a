"""The control operations the service answers, each a pydantic request model plus a call into the core."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from consumers.api import Operation
from core.errors import NotFound
from core.sessions.codec import record_to_json

if TYPE_CHECKING:
    from consumers.service import TurnstileService


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionIdRequest(Request):
    session_id: str = Field(min_length=1, max_length=512)


class ListSessionsRequest(Request):
    parent_id: str | None = Field(None, description="children of this session; omit for every session")
    roots_only: bool = Field(False, description="only root sessions (parent_id absent)")
    status: str | None = None


def control_operations(service: TurnstileService) -> list[Operation]:
    """Every control operation of the service, bound to its running parts."""

    def manager() -> Any:
        return service.manager

    async def session_get(req: SessionIdRequest) -> Any:
        record = manager().get_session(req.session_id)
        if record is None:
            raise NotFound(f"session {req.session_id!r} not found")
        return record_to_json(record)

    async def session_list(req: ListSessionsRequest) -> Any:
        m = manager()
        if req.parent_id is not None:
            records = m.list_sessions(parent_id=req.parent_id, status=req.status)
        elif req.roots_only:
            records = m.list_sessions(parent_id=None, status=req.status)
        else:
            records = m.list_sessions(status=req.status)
        return [record_to_json(r) for r in records]

    async def session_delete(req: SessionIdRequest) -> Any:
        m = manager()
        if m.get_session(req.session_id) is None:
            raise NotFound(f"session {req.session_id!r} not found")
        await m.delete_session(req.session_id)
        return {"session_id": req.session_id, "generation": m.generation_of(req.session_id)}

    async def session_generation(req: SessionIdRequest) -> Any:
        return {"session_id": req.session_id, "generation": manager().generation_of(req.session_id)}

    return [
        *_area_operations(service),
        Operation("session", "get", SessionIdRequest, session_get, "one session record"),
        Operation("session", "list", ListSessionsRequest, session_list, "session records, filtered"),
        Operation("session", "delete", SessionIdRequest, session_delete, "delete a session and its subtree"),
        Operation("session", "generation", SessionIdRequest, session_generation, "the session's generation"),
    ]


def _area_operations(service: TurnstileService) -> list[Operation]:
    """Operations contributed by the area modules (sessions/places/workspaces, turns/knowledge)."""
    ops: list[Operation] = []
    for module_name in ("consumers.ops_sessions", "consumers.ops_turns"):
        try:
            module = __import__(module_name, fromlist=["operations"])
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        ops.extend(module.operations(service))
    return ops
