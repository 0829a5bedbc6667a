"""Every control operation declares the model of its reply's ``result``; event data is typed per type."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from consumers.api import Operation
from consumers.catalog import find, operation_specs
from schemas.events import EVENT_DATA, parse_event
from schemas.turns_results import InterruptOut
from schemas.wire import Page


def _is_model_type(result: Any) -> bool:
    if isinstance(result, type) and issubclass(result, BaseModel):
        return True
    # A list (or a page of a list operation: {result: [items], next_cursor}) of models.
    return typing.get_origin(result) in (list, Page) and _is_model_type(typing.get_args(result)[0])


def test_every_operation_declares_a_result_model() -> None:
    specs = operation_specs()
    assert len(specs) >= 37
    assert len({s.name for s in specs}) == len(specs)
    missing = [s.name for s in specs if not _is_model_type(s.result)]
    assert not missing, f"operations without a result model: {missing}"
    assert all(s.summary for s in specs)


def test_result_is_read_from_the_return_annotation_or_given() -> None:
    async def call(req: BaseModel) -> InterruptOut:
        raise NotImplementedError

    async def untyped(req: BaseModel) -> Any:
        raise NotImplementedError

    assert Operation("a", "b", BaseModel, call).result is InterruptOut
    assert Operation("a", "b", BaseModel, untyped).result is None
    assert Operation("a", "b", BaseModel, untyped, "s", InterruptOut).result is InterruptOut
    spec = find("session.list")
    assert spec is not None and typing.get_origin(spec.result) is Page
    assert find("no.such") is None


SESSION = {
    "id": "s1", "name": None, "title": None, "parent_id": None, "children": [], "status": "active",
    "created_at": 1.0, "updated_at": 1.0, "created_from": None, "input_context": None, "result": None,
    "metadata": {}, "kind": "room", "origin_platform": "cli", "origin_chat": None, "workspace": None, "work": None,
    "current_dir": None, "origin_instance": None, "last_reply_at": None, "last_turn": None, "tokens": None,
    "take_settings": None,
}


@pytest.mark.parametrize(("event_type", "data"), [
    ("session.created", {"session": SESSION}),
    ("session.updated", {"session": SESSION, "change": "child_created", "child_id": "s1:c"}),
    ("turn.started", {"inbound_id": "m1", "from_elsewhere": False, "turn_id": "t1", "mode": "conversation",
                      "generation": 0}),
    ("turn.ended", {"inbound_id": "m1", "turn_id": "t1", "outcome": "error", "error": "provider: boom",
                    "mode": "conversation", "status": "idle", "generation": 0}),
    ("message.dropped", {"inbound_id": "m1", "reason": "busy", "generation": 0}),
    ("usage", {"input": 3, "output": 4}),
    ("service.degraded", {"reason": "store_unavailable", "error": "OperationalError: x", "waiting": 2}),
    ("service.recovered", {"degraded_s": 1.5, "failed_attempts": 3}),
])
def test_event_data_is_typed_per_type(event_type: str, data: dict[str, Any]) -> None:
    event = parse_event({"type": event_type, "session_id": "s1", "at": 1.0, "data": data})
    assert type(event.data) is EVENT_DATA[event_type]  # type: ignore[attr-defined]


def test_event_data_refuses_a_wrong_shape() -> None:
    with pytest.raises(ValidationError):
        parse_event({"type": "turn.ended", "session_id": "s1", "at": 1.0, "data": {"outcome": "maybe"}})
    with pytest.raises(ValueError, match="unknown event type"):
        parse_event({"type": "nope", "session_id": "s1", "at": 1.0, "data": {}})
