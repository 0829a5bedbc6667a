"""Record builders for the pure-rule tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.sessions.records import OriginChat, SessionRecord, WorkBinding
from core.sessions.rules import session_kind

T0 = 1_793_620_800.0  # 2026-11-02 12:00 UTC


def rec(session_id: str, **fields: Any) -> SessionRecord:
    """A record with sensible times and its kind derived."""
    fields.setdefault("created_at", T0)
    fields.setdefault("updated_at", fields["created_at"])
    record = SessionRecord(id=session_id, **fields)
    kind = session_kind(record.parent_id, record.origin_platform)
    return SessionRecord(**{**record.__dict__, "kind": kind})


def room(session_id: str, platform: str, chat_type: str, target: str, multi: bool, self_id: str | None = None) -> SessionRecord:
    """An IM room root."""
    return rec(session_id, origin_platform=platform, origin_chat=OriginChat(chat_type, multi, target, self_id))


def webui(session_id: str, created_from: str = "webui", workspace: str | None = None, root: str | None = None) -> SessionRecord:
    """A WebUI/CLI/project root."""
    return rec(session_id, created_from=created_from, workspace=workspace, work=WorkBinding(root) if root else None)


def lookup_of(*records: SessionRecord) -> Callable[[str], SessionRecord | None]:
    """A lookup over ``records``."""
    table = {r.id: r for r in records}
    return table.get
