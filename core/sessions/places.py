"""Pure helpers for place and workspace records (SM-28 … SM-31)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePath

from core.sessions.records import (
    DEFAULT_WORKSPACE_KEY,
    JsonObject,
    PlaceRecord,
    SessionRecord,
    WorkspaceRecord,
    workspace_place_key,
)


def merged_metadata(current: JsonObject, updates: JsonObject) -> JsonObject:
    """Metadata merge: top-level keys of ``updates`` replace the current ones whole."""
    return {**current, **updates}


def default_workspace_place(now: float) -> PlaceRecord:
    """The default workspace's place record (no name: its label is a text object)."""
    return PlaceRecord(key=DEFAULT_WORKSPACE_KEY, kind="workspace", created_at=now, updated_at=now)


def window_place(key: str, name: str | None, existing: PlaceRecord | None, now: float) -> PlaceRecord | None:
    """The window record to write for a filing or an inbound: new, renamed, or None if unchanged."""
    if existing is None:
        return PlaceRecord(key=key, kind="window", name=name, created_at=now, updated_at=now)
    if name and name != existing.name:
        return replace(existing, name=name, updated_at=now)
    return None


def workspace_name(root: str) -> str:
    """A workspace's display name: its folder name (duplicates allowed)."""
    return PurePath(root).name or root


def new_workspace(root: str, workspace_id: str, position: int, now: float) -> tuple[WorkspaceRecord, PlaceRecord]:
    """A new workspace record and its place record ``workspace:<id>``."""
    name = workspace_name(root)
    workspace = WorkspaceRecord(id=workspace_id, position=position, created_at=now, name=name, root=root)
    place = PlaceRecord(
        key=workspace_place_key(workspace_id), kind="workspace", created_at=now, updated_at=now, name=name, root=root
    )
    return workspace, place


def detached_from_workspace(record: SessionRecord, now: float) -> SessionRecord:
    """A root that loses its removed workspace: workspace, binding and current_dir cleared."""
    return replace(record, workspace=None, work=None, current_dir=None, updated_at=now)
