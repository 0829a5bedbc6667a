"""``trusted`` builds the model validation would, from values of the fields' types (pydantic internals)."""

from __future__ import annotations

import pydantic
import pytest

from core.engine.journal import EntryKind, JournalEntry
from core.providers.base import ModelRequest, ToolSpec
from core.trusted_models import trusted


def test_a_trusted_journal_entry_is_the_validated_one() -> None:
    fields = {"seq": 3, "kind": EntryKind.USER_MESSAGE, "turn_id": "turn_1", "external_event_id": None,
              "at": "2026-12-02T00:00:00+00:00", "payload": {"text": "hi", "attachments": []}}
    built = trusted(JournalEntry, dict(fields))
    validated = JournalEntry(**fields)
    assert built == validated
    assert built.model_dump() == validated.model_dump()
    assert built.model_dump_json() == validated.model_dump_json()
    assert built.model_fields_set == validated.model_fields_set
    assert built.model_copy(update={"seq": 4}) == JournalEntry(**{**fields, "seq": 4})
    assert set(JournalEntry.model_fields) == set(fields)  # Session.commit passes these: a new field must be added
    with pytest.raises(pydantic.ValidationError):  # still frozen
        built.seq = 5  # type: ignore[misc]


def test_a_trusted_model_request_is_the_validated_one() -> None:
    fields = {"model": "m", "reasoning_effort": "low", "system_prompt": "sys",
              "messages": [{"role": "user", "content": "hi"}],
              "tools": [ToolSpec(name="t", description="d", parameters={"type": "object"})],
              "purpose": "chat", "on_text": None, "content_chars": 2}
    built = trusted(ModelRequest, dict(fields))
    assert built == ModelRequest(**fields)
    assert built.model_dump(mode="json") == ModelRequest(**fields).model_dump(mode="json")
    assert set(ModelRequest.model_fields) == set(fields)  # trusted needs every field: a new one must be added
