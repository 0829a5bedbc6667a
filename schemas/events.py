"""Typed ``data`` of every event type (``schemas.wire.Event`` carries it as an object).

``EVENT_DATA`` maps each ``EventType`` to its data model and ``typed_event`` gives the whole
event with that data, for the JSON Schemas and the AsyncAPI document. Known fields are typed;
``extra="allow"`` lets a client written against this version read a later one that adds a field.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, create_model

from schemas.control import SessionRecordOut
from schemas.wire import EventType

TurnOutcome = Literal["replied", "silent", "aborted", "error"]


class EventData(BaseModel):
    """Base of every event's ``data``."""

    model_config = ConfigDict(extra="allow", frozen=True)


class SessionEventData(EventData):
    """``session.*``: the record as it now is, plus what changed where that applies."""

    session: SessionRecordOut
    change: str | None = Field(None, description="session.updated: turn_started, turn_ended (with the usage of the turn), child_created, …")
    child_id: str | None = Field(None, description="child_created / child_deleted: the child")
    result: str | None = Field(None, description="session.completed: the result")
    generation: int | None = Field(None, description="session.deleted: the new generation")


class TurnStartedData(EventData):
    """``turn.started``."""

    turn_id: str | None
    mode: str = Field(description="conversation, free_time, wakeup, ingress, …")
    generation: int
    inbound_id: str | None = Field(None, description="the inbound message it serves (absent for control turns)")
    from_elsewhere: bool | None = Field(None, description="SM-11: entered through another platform")
    trigger: str | None = Field(None, description="the control operation that started it (turn.retry, …)")


class TurnEndedData(EventData):
    """``turn.ended``: ``error`` is set when ``outcome`` is ``error``."""

    turn_id: str | None
    outcome: TurnOutcome
    error: str | None
    mode: str
    status: str = Field(description="engine status after the turn")
    generation: int
    inbound_id: str | None = None
    trigger: str | None = None


class MessageDroppedData(EventData):
    """``message.dropped``: an inbound message that got no turn."""

    inbound_id: str
    reason: str = Field(description="stale_generation, busy, duplicate, not_staged, failed, or an error code")
    generation: int
    detail: str | None = None


class UsageData(EventData):
    """``usage``: tokens of the turn's model calls not reported before."""

    input: int = Field(ge=0)
    output: int = Field(ge=0)


class ServiceDegradedData(EventData):
    """``service.degraded`` (subject ``<prefix>.events._.service.degraded``)."""

    reason: str = Field(description="store_unavailable")
    error: str | None
    waiting: int = Field(description="inbound messages held")


class ServiceRecoveredData(EventData):
    """``service.recovered`` (subject ``<prefix>.events._.service.recovered``)."""

    degraded_s: float
    failed_attempts: int


EVENT_DATA: dict[str, type[EventData]] = {
    "session.created": SessionEventData,
    "session.updated": SessionEventData,
    "session.completed": SessionEventData,
    "session.deleted": SessionEventData,
    "turn.started": TurnStartedData,
    "turn.ended": TurnEndedData,
    "message.dropped": MessageDroppedData,
    "usage": UsageData,
    "service.degraded": ServiceDegradedData,
    "service.recovered": ServiceRecoveredData,
}
assert set(EVENT_DATA) == set(get_args(EventType)), "every EventType needs its data model"


@cache
def typed_event(event_type: str) -> type[BaseModel]:
    """The event envelope of ``event_type`` with its typed ``data``."""
    data_model = EVENT_DATA[event_type]
    name = "Event_" + event_type.replace(".", "_")
    fields: dict[str, Any] = {
        "type": (Literal[event_type], ...),
        "session_id": (str | None, Field(description="null for service events (token `_`)")),
        "at": (float, Field(description="epoch seconds when the event was emitted")),
        "data": (data_model, ...),
    }
    model: type[BaseModel] = create_model(
        name, __config__=ConfigDict(extra="forbid", frozen=True), __doc__=f"Event {event_type}.", **fields
    )
    return model


def parse_event(value: dict[str, Any]) -> BaseModel:
    """Validate an event against its type's model (``ValueError`` for an unknown type)."""
    event_type = value.get("type")
    if event_type not in EVENT_DATA:
        raise ValueError(f"unknown event type {event_type!r}")
    return typed_event(str(event_type)).model_validate(value)
