"""A record's JSON form: the same for a record encoded again (its row, then its event), fresh per call."""

from __future__ import annotations

from core.sessions.record_json import RECENT_RECORDS, record_from_json, record_to_json
from core.sessions.records import LastTurn, TokenUsage, evolved

from .records_for_tests import room


def test_a_record_encoded_again_gives_an_equal_fresh_dict_and_a_changed_record_its_own() -> None:
    record = room("s1", "telegram", "group", "42", True, "bot")
    first = record_to_json(record)
    del first["kind"], first["children"]  # what the row builder does to its copy
    second = record_to_json(record)
    assert "kind" in second and "children" in second
    assert evolved(record_from_json(second), kind=record.kind) == evolved(record, children=())  # kind: derived
    changed = evolved(record, last_turn=LastTurn("replied", 5.0, None), tokens=TokenUsage(3, 4))
    third = record_to_json(changed)
    assert third["last_turn"] == {"outcome": "replied", "ended_at": 5.0} and third["tokens"] == {"input": 3, "output": 4}
    assert record_to_json(record)["last_turn"] is None


def test_many_records_encoded_in_between_change_nothing() -> None:
    records = [room(f"s{i}", "telegram", "dm", str(i), False) for i in range(RECENT_RECORDS * 2)]
    first = [record_to_json(r) for r in records]
    assert [record_to_json(r) for r in records] == first
    assert [r["id"] for r in first] == [f"s{i}" for i in range(RECENT_RECORDS * 2)]
