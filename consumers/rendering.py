"""Rendering records as control results: labels in the service time zone (SM-2), SM-9's room class."""

from __future__ import annotations

from collections.abc import Callable
from datetime import tzinfo

from core.sessions import rules
from core.sessions.manager import SessionManager
from core.sessions.record_json import place_to_json, record_to_json, workspace_to_json
from core.sessions.records import DEFAULT_WORKSPACE_ID, PlaceRecord, SessionRecord, WorkspaceRecord
from core.sessions.text import TextRef
from schemas.control import LabelOut, PlaceOut, SessionOut, WorkspaceOut


class Rendering:
    """Turns records into result models, rendering text objects in the service time zone (SM-2)."""

    def __init__(self, tz: tzinfo, room_class_of: Callable[[str], str]) -> None:
        self._tz = tz
        self._room_class_of = room_class_of

    def label(self, text: TextRef) -> LabelOut:
        return LabelOut(source=text.render("en", self._tz), en=text.render("en", self._tz), zh=text.render("zh", self._tz))

    def session(self, record: SessionRecord) -> SessionOut:
        return SessionOut.model_validate({
            **record_to_json(record),
            "label": self.label(rules.session_label(record)),
            "room_class": self._room_class_of(record.id),
        })

    def sessions(self, records: list[SessionRecord]) -> list[SessionOut]:
        return [self.session(r) for r in records]

    def place(self, place: PlaceRecord) -> PlaceOut:
        return PlaceOut.model_validate({**place_to_json(place), "label": self.label(rules.place_label(place))})

    def workspace(self, workspace: WorkspaceRecord) -> WorkspaceOut:
        if workspace.name:
            text = TextRef.literal(workspace.name)
        elif workspace.id == DEFAULT_WORKSPACE_ID:
            text = TextRef("place.label.default_workspace")
        else:
            text = TextRef.literal(workspace.id)
        return WorkspaceOut.model_validate({**workspace_to_json(workspace), "label": self.label(text)})



def rendering(tz: tzinfo, manager: SessionManager) -> Rendering:
    """Result rendering in the service time zone, with SM-9's room class read from the manager."""
    return Rendering(tz, room_class_of=lambda session_id: str(manager.room_class(session_id)))
