"""Control models of time travel: a session's state at any journaled step (``session.state_at``)
and the steps there are (``session.state_versions``, paged).

A checkpoint stream keeps only the last ``TURNSTILE_CHECKPOINTS_PER_SESSION`` snapshots of a
session; the journal keeps every step, so the service rebuilds the complete snapshot at any
``state_version`` (the number of journal entries folded). Documented in docs/protocol.md (Time travel).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from schemas.control import ControlRequest, ControlResult, PageRequest, SessionId

HeaderSource = Literal["checkpoint", "options"]


class StateVersionsRequest(PageRequest):
    """session.state_versions: the steps of the session's current generation, oldest first, paged."""

    session_id: SessionId


class StateAtRequest(ControlRequest):
    """session.state_at: the complete snapshot of the session's current generation at ``state_version``."""

    session_id: SessionId
    state_version: int = Field(ge=1, description="journal entries folded: 1 is the first step")


class StateVersionOut(ControlResult):
    """One journaled step: the state version it makes, its entry kind (and event type), turn and time."""

    state_version: int = Field(description="the state version after this step (its journal seq + 1)")
    kind: str = Field(description="the journal entry kind: user_message, agent_message, tool_call, …")
    type: str | None = Field(None, description="an event entry's type (turn_started, turn_ended, …)")
    turn_id: str | None = None
    at: str = Field(description="when it was journaled (RFC 3339, UTC)")


class StateAtOut(ControlResult):
    """The session at one state version, rebuilt from its journal."""

    session_id: str
    generation: int
    state_version: int
    latest_version: int = Field(description="the newest state version the journal holds")
    header_from: HeaderSource = Field(
        description="where the fields the journal does not carry (mode, channel, runtime, prompt, work) come "
        "from: the session's latest checkpoint, or the options a fresh open would use when it has none")
    snapshot: dict[str, Any] = Field(description="the complete KS-20 snapshot (docs/schemas/snapshot.json)")


TIME_TRAVEL_MODELS: dict[str, type[BaseModel]] = {
    "session.state_versions": StateVersionsRequest,
    "session.state_at": StateAtRequest,
}
