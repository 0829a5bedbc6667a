"""Pure rules over session records: kinds, labels, roots, audiences and places.

Every function takes what it needs (a lookup, an owner predicate, the known
workspace ids); none reads a clock, a store or a broker.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Literal, Protocol

from core.sessions.records import (
    DEFAULT_WORKSPACE_ID,
    DEFAULT_WORKSPACE_KEY,
    OriginChat,
    PlaceRecord,
    SessionKind,
    SessionPlace,
    SessionRecord,
    window_key,
    workspace_place_key,
)
from core.sessions.text import TextRef

SessionLookup = Callable[[str], SessionRecord | None]
IsOwner = Callable[[str, str], bool]
RoomClass = Literal["room", "owner-only", "internal"]
# (session_id, what is wrong) — the caller decides how often to log it.
AnomalyReporter = Callable[[str, str], None]


class HasEntryPlatform(Protocol):
    """Anything that says which platform a message entered through."""

    @property
    def session_id(self) -> str | None: ...

    @property
    def platform(self) -> str: ...


def session_kind(parent_id: str | None, origin_platform: str | None) -> SessionKind:
    """SM-1: ``task`` with a parent, else ``room`` with an origin platform, else ``owner``."""
    if parent_id:
        return "task"
    if origin_platform:
        return "room"
    return "owner"


def session_label(record: SessionRecord) -> TextRef:
    """SM-2: the name when set; else "Session <date time>" (root) or "Subtask <time>" (child)."""
    if record.name:
        return TextRef.literal(record.name)
    key = "session.label.child" if record.parent_id else "session.label.root"
    return TextRef.at_time(key, record.created_at)


def place_label(place: PlaceRecord) -> TextRef:
    """SM-2: a place's name when set; the default workspace is "Default workspace"."""
    if place.name:
        return TextRef.literal(place.name)
    if place.key == DEFAULT_WORKSPACE_KEY:
        return TextRef("place.label.default_workspace")
    return TextRef.literal(place.key)


def root_of(session_id: str, lookup: SessionLookup) -> SessionRecord | None:
    """The root of ``session_id``'s tree, or None when the id or any ancestor is missing or cyclic."""
    seen: set[str] = set()
    record = lookup(session_id)
    while record is not None:
        if record.parent_id is None:
            return record
        if record.id in seen:
            return None
        seen.add(record.id)
        record = lookup(record.parent_id)
    return None


def is_unfiled(root: SessionRecord) -> bool:
    """SM-18: a root filed by id only — no origin platform, no created_from, no binding."""
    return root.origin_platform is None and root.created_from is None and root.work is None


def peer_is_owner(root: SessionRecord, is_owner: IsOwner | None) -> bool:
    """True when the root is a one-to-one window whose peer is an owner identity."""
    chat = root.origin_chat
    if is_owner is None or root.origin_platform is None or chat is None or chat.multi_party:
        return False
    return bool(chat.target_id) and is_owner(root.origin_platform, chat.target_id)


def room_class(record: SessionRecord | None, lookup: SessionLookup, is_owner: IsOwner) -> RoomClass:
    """SM-9: who is in the audience, judged on the root.

    With an origin: multi-party → ``room``; one-to-one with an owner peer →
    ``owner-only``; other one-to-one → ``room`` (only the multi-party flag is
    read; an origin without a chat counts as a room). No origin but a
    created_from → ``owner-only``. Everything else → ``internal``.
    """
    if record is None:
        return "internal"
    root = record if record.parent_id is None else root_of(record.parent_id, lookup)
    if root is None:
        return "internal"
    if root.origin_platform:
        return "owner-only" if peer_is_owner(root, is_owner) else "room"
    if root.created_from:
        return "owner-only"
    return "internal"


def origin_chat_of(session_id: str, lookup: SessionLookup | None) -> OriginChat | None:
    """SM-10: the root's origin chat, or None (no manager, unknown id, no chat)."""
    if lookup is None:
        return None
    root = root_of(session_id, lookup)
    return root.origin_chat if root is not None else None


def from_elsewhere(message: HasEntryPlatform, lookup: SessionLookup | None) -> bool:
    """SM-11: the message entered through another platform than the room's origin; unknown → False."""
    if lookup is None or not message.session_id:
        return False
    root = root_of(message.session_id, lookup)
    if root is None or not root.origin_platform:
        return False
    return message.platform != root.origin_platform


def place_of(
    session_id: str,
    lookup: SessionLookup,
    is_owner: IsOwner | None,
    workspace_ids: Container[str],
    report: AnomalyReporter | None = None,
) -> SessionPlace:
    """SM-27: the place of a session, judged on its root.

    With an origin: owner's one-to-one → default workspace; otherwise the window
    ``platform:type:target`` (bad chat data → empty segments, reported, still a
    window). ``is_owner=None`` (no authority) counts one-to-one as a window.
    Without an origin: the recorded workspace, or the default one (none,
    unknown id, unfiled, internal, or a recorded workspace with no record).
    """
    default = SessionPlace("workspace", DEFAULT_WORKSPACE_KEY)
    root = root_of(session_id, lookup)
    if root is None:
        return default
    if root.origin_platform:
        if peer_is_owner(root, is_owner):
            return default
        chat = root.origin_chat
        if (chat is None or not chat.target_id) and report is not None:
            report(root.id, "origin chat missing or without target; window key has empty segments")
        chat_type = chat.type if chat is not None else ""
        target = chat.target_id if chat is not None else ""
        return SessionPlace("window", window_key(root.origin_platform, chat_type, target))
    if root.workspace and root.workspace != DEFAULT_WORKSPACE_ID:
        if root.workspace in workspace_ids:
            return SessionPlace("workspace", workspace_place_key(root.workspace))
        if report is not None:
            report(root.id, f"recorded workspace {root.workspace!r} has no record; using the default")
    return default
