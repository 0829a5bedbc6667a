"""Session, place and workspace records (seed 003), as immutable values.

Records are frozen dataclasses; every change makes a new record with
``dataclasses.replace`` (or ``evolved``, its cheap twin for the turn hot path).
Times are float epoch seconds. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Final, Literal, Union

# A recursive alias: typing.Union keeps the quoted self-references lazy for pydantic.
JsonValue = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]  # noqa: UP007
JsonObject = dict[str, JsonValue]

SessionStatus = Literal["active", "waiting", "completed", "error", "archived"]
SESSION_STATUSES: Final[tuple[SessionStatus, ...]] = ("active", "waiting", "completed", "error", "archived")

SessionKind = Literal["owner", "room", "task"]

TurnOutcome = Literal["replied", "silent", "aborted", "error"]
TURN_OUTCOMES: Final[tuple[TurnOutcome, ...]] = ("replied", "silent", "aborted", "error")

TakeScope = Literal["session", "same-platform", "all"]
TAKE_SCOPES: Final[tuple[TakeScope, ...]] = ("session", "same-platform", "all")

PlaceKind = Literal["window", "workspace"]

DEFAULT_WORKSPACE_ID: Final = "default"
DEFAULT_WORKSPACE_KEY: Final = "workspace:default"
LAST_TURN_ERROR_MAX_CHARS: Final = 200


@dataclass(frozen=True)
class OriginChat:
    """The chat window a room was filed from; ``target_id`` is the group or the peer account."""

    type: str
    multi_party: bool
    target_id: str
    self_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class WorkBinding:
    """A project session's binding: its root directory, extra writable roots and worktrees."""

    root: str
    extra_roots: tuple[str, ...] = ()
    worktrees: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)  # one per session: no instance dict
class LastTurn:
    """How the session's most recently ended turn ended (``error`` only for outcome ``error``)."""

    outcome: TurnOutcome
    ended_at: float
    error: str | None = None


@dataclass(frozen=True, slots=True)  # one per session: no instance dict
class TokenUsage:
    """Model tokens used by the session itself (children not included)."""

    input: int = 0
    output: int = 0


@dataclass(frozen=True)
class TakeSettings:
    """Per-session take settings (SM-24).

    Default: scope ``session`` (a session may take only from itself) and every
    toggle off. A record whose ``take_settings`` is None uses its root's
    settings, and the default when the root has none either.
    """

    scope: TakeScope = "session"
    cross_bot_account: bool = False
    read_other_groups: bool = False
    read_others_dms: bool = False


DEFAULT_TAKE_SETTINGS: Final = TakeSettings()


@dataclass(frozen=True)
class SessionRecord:
    """One session of the tree with every field of the seed's ``SessionInfo``.

    ``kind`` is derived (SM-1) and recomputed whenever a record is built by the
    manager; ``children`` is derived from the children's ``parent_id``.
    """

    id: str
    created_at: float
    updated_at: float
    kind: SessionKind = "owner"
    status: SessionStatus = "active"
    name: str | None = None
    title: str | None = None
    parent_id: str | None = None
    children: tuple[str, ...] = ()
    created_from: str | None = None
    input_context: str | None = None
    result: str | None = None
    metadata: JsonObject = field(default_factory=dict)
    origin_platform: str | None = None
    origin_chat: OriginChat | None = None
    workspace: str | None = None
    work: WorkBinding | None = None
    current_dir: str | None = None
    origin_instance: str | None = None
    last_reply_at: float | None = None
    last_turn: LastTurn | None = None
    tokens: TokenUsage | None = None
    take_settings: TakeSettings | None = None


SESSION_RECORD_FIELDS: Final = frozenset(f.name for f in fields(SessionRecord))


def evolved(record: SessionRecord, **changes: object) -> SessionRecord:
    """``dataclasses.replace(record, **changes)`` at a fraction of its cost, for the hot path.

    Turn bookkeeping builds a new record three times per turn; ``replace`` re-runs the
    generated ``__init__`` through keyword plumbing for all 24 fields. A frozen
    ``SessionRecord`` has no ``__post_init__`` or validation, so copying the field dict
    and overriding the changed entries gives the same value. Unknown names raise, as
    with ``replace``. (Relies on the record keeping a ``__dict__``, i.e. no ``slots=True``.)
    """
    unknown = changes.keys() - SESSION_RECORD_FIELDS
    if unknown:
        raise TypeError(f"SessionRecord has no field(s) {', '.join(sorted(unknown))}")
    copy = object.__new__(SessionRecord)
    values = copy.__dict__
    values.update(record.__dict__)
    values.update(changes)
    return copy


@dataclass(frozen=True)
class SessionPlace:
    """Where a session belongs: a chat ``window`` or a local ``workspace``."""

    kind: PlaceKind
    key: str


@dataclass(frozen=True)
class PlaceRecord:
    """A stored place: per-place plugin data lives in ``metadata``."""

    key: str
    kind: PlaceKind
    created_at: float
    updated_at: float
    name: str | None = None
    root: str | None = None
    metadata: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class WorkspaceRecord:
    """A registered workspace; ``position`` keeps registration order (default is 0)."""

    id: str
    position: int
    created_at: float
    name: str | None = None
    root: str | None = None


DEFAULT_WORKSPACE: Final = WorkspaceRecord(id=DEFAULT_WORKSPACE_ID, position=0, created_at=0.0)


def workspace_place_key(workspace_id: str) -> str:
    """The place key of a workspace: ``workspace:<id>``."""
    return f"workspace:{workspace_id}"


def window_key(platform: str, chat_type: str, target_id: str) -> str:
    """The place key of a chat window: ``platform:type:target`` (no bot account in it)."""
    return f"{platform}:{chat_type}:{target_id}"
