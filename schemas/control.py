"""Control API wire models (protocol v1): requests and results of ``<prefix>.api.<resource>.<verb>``.

Every request model refuses unknown fields (``extra=forbid``), so a typo is an
``invalid`` refusal rather than a silently ignored key. The one deliberate
exception is SM-8: the service-owned session fields (``kind``, ``origin_*``,
``created_from``, ``workspace``, ``work``, ``current_dir``, ``origin_instance``,
``last_reply_at``, ``last_turn``, ``tokens``, and the bookkept ``children``,
``created_at``, ``updated_at``, ``take_settings``) are *accepted* inside a
session's ``fields`` and silently dropped by the session manager, so a client
may send back a record it read. The dedicated ``creation`` argument is the only
way to set ``created_from``, ``workspace`` and ``work`` (SM-4, SM-5).

Replies are ``{ok: true, result}`` or ``{ok: false, error: {code, message}}``
(``schemas.wire.ControlOk`` / ``ControlError``); the result models are below.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from schemas.tokens import check_session_id_size

SessionStatus = Literal["active", "waiting", "completed", "error", "archived"]
TakeScope = Literal["session", "same-platform", "all"]
MemoryClearScope = Literal["session", "all"]

SessionId = Annotated[
    str, Field(min_length=1, max_length=512, description="a session id"), AfterValidator(check_session_id_size)
]


class ControlRequest(BaseModel):
    """Base of every control request: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ControlResult(BaseModel):
    """Base of every control result."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# -- requests: sessions ---------------------------------------------------------


class _AcceptsServiceOwned(ControlRequest):
    """SM-8: the service-owned fields are accepted, so a record read back can be sent again,
    and then dropped by the manager; ``sent()`` is what the caller actually sent."""

    kind: Any = None
    origin_platform: Any = None
    origin_chat: Any = None
    created_from: Any = None
    workspace: Any = None
    work: Any = None
    current_dir: Any = None
    origin_instance: Any = None
    last_reply_at: Any = None
    last_turn: Any = None
    tokens: Any = None
    children: Any = None
    created_at: Any = None
    updated_at: Any = None
    take_settings: Any = None
    label: Any = None

    def sent(self) -> dict[str, object]:
        """The fields the caller actually sent (the manager drops the service-owned ones)."""
        sent = self.model_dump(exclude_unset=True)
        sent.pop("label", None)
        return sent


class SessionFieldsIn(_AcceptsServiceOwned):
    """Caller-settable fields of a new session; ``metadata`` is stored as is (SM-19).

    The service-owned fields are accepted and dropped (SM-8); see the module docstring.
    """

    id: SessionId | None = Field(None, description="session id; generated when absent")
    name: str | None = Field(None, max_length=256)
    title: str | None = Field(None, max_length=1024)
    parent_id: SessionId | None = None
    status: SessionStatus | None = None
    input_context: str | None = None
    result: str | None = None
    metadata: dict[str, Any] | None = None


class SessionChangesIn(_AcceptsServiceOwned):
    """A change to a session: absent fields stay; ``metadata`` merges top-level keys (SM-20).

    Service-owned fields are accepted and dropped, as for creation (SM-8).
    """

    name: str | None = Field(None, max_length=256)
    title: str | None = Field(None, max_length=1024)
    status: SessionStatus | None = None
    input_context: str | None = None
    result: str | None = None
    metadata: dict[str, Any] | None = None


class WorkIn(ControlRequest):
    """A project session's work binding (SM-5)."""

    root: str = Field(min_length=1, max_length=4096)
    extra_roots: list[str] = Field(default_factory=list, max_length=256)
    worktrees: list[str] = Field(default_factory=list, max_length=256)


class CreationIn(ControlRequest):
    """The dedicated creation argument (SM-4, SM-5): which surface made a root, and where it lives."""

    created_from: str = Field(min_length=1, max_length=64, description="webui, cli, …")
    workspace: str | None = Field(None, min_length=1, max_length=64, description="workspace id; default when absent")
    work: WorkIn | None = None


class SessionIdRequest(ControlRequest):
    """Names one session."""

    session_id: SessionId


class SessionCreateRequest(ControlRequest):
    """session.create: a root, or a child when ``fields.parent_id`` is set (then no ``creation``)."""

    fields: SessionFieldsIn = Field(default_factory=SessionFieldsIn)
    creation: CreationIn | None = None


class SessionCreateChildRequest(ControlRequest):
    """session.create_child: a child of ``parent_id`` (an unknown parent is first filed by id)."""

    parent_id: SessionId
    fields: SessionFieldsIn = Field(default_factory=SessionFieldsIn)


class SessionEnsureRequest(ControlRequest):
    """session.ensure: file ``session_id`` when missing; backfill created_from of an unfiled root."""

    session_id: SessionId
    fields: SessionFieldsIn = Field(default_factory=SessionFieldsIn)
    creation: CreationIn | None = None


DEFAULT_PAGE_LIMIT = 100
MAX_PAGE_LIMIT = 1_000


class PageRequest(ControlRequest):
    """A list request: at most ``limit`` items after ``cursor`` (the previous reply's ``next_cursor``).

    The reply is ``{ok: true, result: [...], next_cursor}``; ``next_cursor`` is null on the last page.
    A page also ends early when one more item would not fit under the server's max payload.
    """

    limit: int = Field(DEFAULT_PAGE_LIMIT, ge=1, le=MAX_PAGE_LIMIT, description="items per page at most")
    cursor: str | None = Field(None, max_length=4096, description="next_cursor of the previous page")


class SessionListRequest(PageRequest):
    """session.list: every session, the children of ``parent_id``, or only roots; optionally by status.

    Paged (``limit``, ``cursor``), in creation order.
    """

    parent_id: SessionId | None = None
    roots_only: bool = False
    status: SessionStatus | None = None


class SessionChildrenRequest(PageRequest):
    """session.children: the children of a session, in creation order, paged."""

    session_id: SessionId


class SessionUpdateRequest(ControlRequest):
    """session.update: change fields, merge metadata (SM-20)."""

    session_id: SessionId
    changes: SessionChangesIn


class SessionTitleRequest(ControlRequest):
    """session.title: set the title."""

    session_id: SessionId
    title: str = Field(max_length=1024)


class SessionCompleteRequest(ControlRequest):
    """session.complete: status completed, result stored (SM-33)."""

    session_id: SessionId
    result: str | None = None


class SessionCurrentDirRequest(ControlRequest):
    """session.set_current_dir (SM-6)."""

    session_id: SessionId
    current_dir: str = Field(min_length=1, max_length=4096)


class SessionExtraRootsRequest(ControlRequest):
    """session.set_extra_roots: replace the project root's extra writable roots (SM-35)."""

    session_id: SessionId
    extra_roots: list[str] = Field(max_length=256)


class SessionWorktreeRequest(ControlRequest):
    """session.add_worktree: add a worktree to the project root's binding (SM-35)."""

    session_id: SessionId
    path: str = Field(min_length=1, max_length=4096)


class TakeSettingsIn(ControlRequest):
    """Per-session take settings (SM-24)."""

    scope: TakeScope = "session"
    cross_bot_account: bool = False
    read_other_groups: bool = False
    read_others_dms: bool = False


class SessionTakeSettingsRequest(ControlRequest):
    """session.take_settings: set (or, with null, reset to the root's / default) the take settings."""

    session_id: SessionId
    settings: TakeSettingsIn | None


# -- requests: memory, take, places, workspaces, platforms ------------------------


class MemoryClearRequest(ControlRequest):
    """memory.clear: clear the session's memory; clearing ``context`` deletes children (SM-23)."""

    session_id: SessionId
    types: list[str] | None = Field(None, max_length=32, description="null = every type; 'context' = history")
    scope: MemoryClearScope = "session"


class PrincipalIn(ControlRequest):
    """An identity acting in the turn: an account on a platform."""

    platform: str = Field(min_length=1, max_length=64)
    user_id: str = Field(max_length=256)


class TakeCheckRequest(ControlRequest):
    """take.check: may ``current_id`` take from ``target_id`` (SM-24)?"""

    current_id: SessionId
    target_id: SessionId
    principal: PrincipalIn | None = None


class EmptyRequest(ControlRequest):
    """A request with no parameters (``{}`` or an empty body)."""


class PlaceGetRequest(ControlRequest):
    """place.get: one place record by key."""

    key: str = Field(min_length=1, max_length=1024)


class PlaceUpdateRequest(ControlRequest):
    """place.update: merge metadata into a place (top-level keys replaced whole, SM-28)."""

    key: str = Field(min_length=1, max_length=1024)
    metadata: dict[str, Any]


class WorkspaceAddRequest(ControlRequest):
    """workspace.add: register an existing directory (absolute path; resolved to its real path)."""

    root: str = Field(min_length=1, max_length=4096)


class WorkspaceIdRequest(ControlRequest):
    """workspace.remove: names one workspace."""

    workspace_id: str = Field(min_length=1, max_length=64)


class PlatformRegisterRequest(ControlRequest):
    """platform.register: add or replace an adapter instance (same ``instance_id`` replaces)."""

    instance_id: str = Field(min_length=1, max_length=256)
    platform: str = Field(min_length=1, max_length=64, pattern=r"^[^.*> \t\r\n]+$")
    type: str = Field("", max_length=64, description="adapter type")
    claims: list[str] = Field(default_factory=list, max_length=1024, description="session ids or 'prefix*'")
    chat_scopes: dict[str, bool] = Field(default_factory=dict, description="chat type → multi-party?")


class PlatformUnregisterRequest(ControlRequest):
    """platform.unregister: remove an adapter instance."""

    instance_id: str = Field(min_length=1, max_length=256)


# -- results ------------------------------------------------------------------------


class LabelOut(ControlResult):
    """A display text object rendered: ``source`` (what the model is given) and per language."""

    source: str
    en: str
    zh: str


class SessionRecordOut(ControlResult):
    """A session record: every field of the seed's SessionInfo (also the ``session`` of session events)."""

    id: str
    name: str | None
    title: str | None
    parent_id: str | None
    children: list[str]
    status: SessionStatus
    created_at: float
    updated_at: float
    created_from: str | None
    input_context: str | None
    result: str | None
    metadata: dict[str, Any]
    kind: Literal["owner", "room", "task"]
    origin_platform: str | None
    origin_chat: dict[str, Any] | None
    workspace: str | None
    work: dict[str, Any] | None
    current_dir: str | None
    origin_instance: str | None
    last_reply_at: float | None
    last_turn: dict[str, Any] | None
    tokens: dict[str, int] | None
    take_settings: dict[str, Any] | None


class SessionOut(SessionRecordOut):
    """A session record (every field of the seed's SessionInfo) plus its rendered ``label`` (SM-2)."""

    label: LabelOut
    room_class: Literal["room", "owner-only", "internal"] = Field(
        description="SM-9, derived: who is in the session's audience, judged on its root"
    )


class PlaceOut(ControlResult):
    """A place record plus its rendered ``label``."""

    key: str
    kind: Literal["window", "workspace"]
    name: str | None
    root: str | None
    metadata: dict[str, Any]
    created_at: float
    updated_at: float
    label: LabelOut


class WorkspaceOut(ControlResult):
    """A workspace plus its rendered ``label``."""

    id: str
    name: str | None
    root: str | None
    label: LabelOut


class DeletedOut(ControlResult):
    """session.delete: the deleted ids (parents first) and the session's new generation."""

    session_id: str
    deleted: list[str]
    generation: int


class GenerationOut(ControlResult):
    """session.generation: compare only for equality (SM-22)."""

    session_id: str
    generation: int


class MemoryClearOut(ControlResult):
    """memory.clear: whether the history was cleared, and which children that deleted (SM-23)."""

    session_id: str
    history_cleared: bool
    deleted: list[str]


class TakeVerdictOut(ControlResult):
    """take.check: ``ok``, or a refusal with a rendered ``reason``."""

    ok: bool
    reason: LabelOut | None = None


class PlaceOfOut(ControlResult):
    """place.of: the session's place (SM-27) and its record, when one exists."""

    session_id: str
    kind: Literal["window", "workspace"]
    key: str
    place: PlaceOut | None


class WorkspaceAddedOut(ControlResult):
    """workspace.add: the workspace, and whether it was already registered (SM-29)."""

    workspace: WorkspaceOut
    existed: bool


class WorkspaceRemovedOut(ControlResult):
    """workspace.remove: the sessions that were detached from it (SM-31)."""

    workspace_id: str
    changed_sessions: list[str]


class AdapterInstanceOut(ControlResult):
    """A platform adapter instance."""

    instance_id: str
    platform: str
    type: str
    claims: list[str]
    chat_scopes: dict[str, bool]


class PlatformUnregisteredOut(ControlResult):
    """platform.unregister: whether the instance existed."""

    instance_id: str
    existed: bool


CONTROL_REQUESTS: dict[str, type[ControlRequest]] = {
    "session.create": SessionCreateRequest,
    "session.create_child": SessionCreateChildRequest,
    "session.ensure": SessionEnsureRequest,
    "session.get": SessionIdRequest,
    "session.list": SessionListRequest,
    "session.children": SessionChildrenRequest,
    "session.update": SessionUpdateRequest,
    "session.title": SessionTitleRequest,
    "session.complete": SessionCompleteRequest,
    "session.delete": SessionIdRequest,
    "session.generation": SessionIdRequest,
    "session.set_current_dir": SessionCurrentDirRequest,
    "session.set_extra_roots": SessionExtraRootsRequest,
    "session.add_worktree": SessionWorktreeRequest,
    "session.take_settings": SessionTakeSettingsRequest,
    "memory.clear": MemoryClearRequest,
    "take.check": TakeCheckRequest,
    "place.of": SessionIdRequest,
    "place.get": PlaceGetRequest,
    "place.list": PageRequest,
    "place.update": PlaceUpdateRequest,
    "workspace.add": WorkspaceAddRequest,
    "workspace.list": PageRequest,
    "workspace.remove": WorkspaceIdRequest,
    "platform.register": PlatformRegisterRequest,
    "platform.unregister": PlatformUnregisterRequest,
    "platform.list": PageRequest,
}
"""``resource.verb`` → request model, for clients and the JSON Schema export."""
