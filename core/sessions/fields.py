"""What callers may give when creating or changing a session (SM-4, SM-5, SM-8, SM-19, SM-20)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, cast

from core.errors import InvalidInput
from core.sessions.records import SESSION_STATUSES, JsonObject, SessionStatus, WorkBinding

# SM-8: written only by the service; silently dropped from a caller's session fields.
SERVICE_OWNED_FIELDS: Final = frozenset(
    {
        "kind",
        "origin_platform",
        "origin_chat",
        "created_from",
        "workspace",
        "work",
        "current_dir",
        "origin_instance",
        "last_reply_at",
        "last_turn",
        "tokens",
        # derived or bookkept by the manager, never taken from a caller either
        "children",
        "created_at",
        "updated_at",
        "take_settings",
    }
)
_TEXT_FIELDS: Final = ("id", "name", "title", "parent_id", "input_context", "result")


@dataclass(frozen=True)
class SessionFields:
    """Caller-settable fields of a new session; ``metadata`` is stored as is (SM-19)."""

    id: str | None = None
    name: str | None = None
    title: str | None = None
    parent_id: str | None = None
    status: SessionStatus | None = None
    input_context: str | None = None
    result: str | None = None
    metadata: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class SessionUpdate:
    """A change to a session: None leaves a field as it is; ``metadata`` merges top-level keys (SM-20)."""

    name: str | None = None
    title: str | None = None
    status: SessionStatus | None = None
    input_context: str | None = None
    result: str | None = None
    metadata: JsonObject | None = None


@dataclass(frozen=True)
class SessionCreation:
    """The dedicated creation argument (SM-4, SM-5): which surface made it, where it lives.

    ``workspace`` None or ``"default"`` is the default workspace; a project
    workspace requires ``work`` (its root validated by the caller).
    """

    created_from: str
    workspace: str | None = None
    work: WorkBinding | None = None


def session_fields_from(value: SessionFields | Mapping[str, object] | None) -> SessionFields:
    """SM-8: caller fields with every service-owned field dropped; unknown or ill-typed keys are refused."""
    if value is None:
        return SessionFields()
    if isinstance(value, SessionFields):
        return value
    kept = {k: v for k, v in value.items() if k not in SERVICE_OWNED_FIELDS}
    unknown = sorted(set(kept) - {*_TEXT_FIELDS, "status", "metadata"})
    if unknown:
        raise InvalidInput(f"unknown session field(s): {', '.join(unknown)}")
    texts: dict[str, str | None] = {}
    for name in _TEXT_FIELDS:
        item = kept.get(name)
        if item is not None and not isinstance(item, str):
            raise InvalidInput(f"session field {name!r} must be a string")
        texts[name] = item
    return SessionFields(
        id=texts["id"],
        name=texts["name"],
        title=texts["title"],
        parent_id=texts["parent_id"],
        status=checked_status(kept.get("status")),
        input_context=texts["input_context"],
        result=texts["result"],
        metadata=checked_metadata(kept.get("metadata")) or {},
    )


def checked_status(value: object) -> SessionStatus | None:
    """``value`` as a status, None when absent; anything else is refused."""
    if value is None:
        return None
    if value not in SESSION_STATUSES:
        raise InvalidInput(f"status must be one of {', '.join(SESSION_STATUSES)}")
    return value


def checked_metadata(value: object) -> JsonObject | None:
    """``value`` as a metadata object, None when absent; a non-object is refused."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InvalidInput("metadata must be an object with string keys")
    return cast(JsonObject, dict(value))


_UPDATE_FIELDS: Final = ("name", "title", "input_context", "result")


def session_update_from(value: SessionUpdate | Mapping[str, object]) -> SessionUpdate:
    """A session update from a mapping: service-owned fields dropped; unknown or ill-typed keys refused."""
    if isinstance(value, SessionUpdate):
        return value
    kept = {k: v for k, v in value.items() if k not in SERVICE_OWNED_FIELDS}
    unknown = sorted(set(kept) - {*_UPDATE_FIELDS, "status", "metadata"})
    if unknown:
        raise InvalidInput(f"field(s) cannot be updated: {', '.join(unknown)}")
    texts: dict[str, str | None] = {}
    for name in _UPDATE_FIELDS:
        item = kept.get(name)
        if item is not None and not isinstance(item, str):
            raise InvalidInput(f"session field {name!r} must be a string")
        texts[name] = item
    return SessionUpdate(
        name=texts["name"],
        title=texts["title"],
        status=checked_status(kept.get("status")),
        input_context=texts["input_context"],
        result=texts["result"],
        metadata=checked_metadata(kept.get("metadata")),
    )
