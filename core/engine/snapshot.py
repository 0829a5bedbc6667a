"""The versioned snapshot (KS-20): accepted state plus exact derived projections.

The snapshot is complete: ``Session.open(restored=snapshot)`` rebuilds an equal
session. ``state_version`` is the number of journal entries folded into it, so it
only grows and tells two checkpoints of one session apart.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from core.engine.chatend import project_messages, transcript_chatend_text
from core.engine.state import SessionState
from core.errors import InvalidInput

FORMAT_VERSION = 1

Status = Literal["idle", "pending", "exhausted", "completed"]


class Snapshot(SessionState):
    """A complete, versioned session checkpoint; JSON Schema via ``Snapshot.model_json_schema()``."""

    format_version: Literal[1] = FORMAT_VERSION
    state_version: int = 0
    status: Status = "idle"
    projection: list[dict[str, Any]] = Field(default_factory=list)
    chatend_text: str = ""


def status_of(state: SessionState) -> Status:
    """Derive the coarse status from accepted state."""
    if state.completed:
        return "completed"
    if state.turn.pending:
        return "exhausted" if state.exhausted else "pending"
    return "idle"


def build_snapshot(state: SessionState, system_prompt: str) -> dict[str, Any]:
    """Snapshot ``state`` as a JSON-ready dict with exactly the fields of ``Snapshot``.

    Built on the hot path of every checkpoint, so the transcript (already JSON-ready
    dicts, often most of the bytes) is copied by reference instead of being walked by
    the serializer again; ``test_snapshot`` proves the result equals the validated model's.
    """
    projection = project_messages(state.transcript)
    data = state.model_dump(mode="json", exclude={"transcript"})
    data["transcript"] = list(state.transcript)
    data["format_version"] = FORMAT_VERSION
    data["state_version"] = state.next_seq
    data["status"] = status_of(state)
    data["projection"] = projection
    data["chatend_text"] = transcript_chatend_text(system_prompt, state.transcript)
    return {name: data[name] for name in Snapshot.model_fields}


def state_from_snapshot(data: dict[str, Any]) -> SessionState:
    """Validate a snapshot and return its accepted state; refuse unknown format versions."""
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise InvalidInput(f"unsupported snapshot format_version {version!r} (expected {FORMAT_VERSION})")
    snap = Snapshot.model_validate(data)
    fields = set(SessionState.model_fields)
    return SessionState.model_validate(snap.model_dump(include=fields))
