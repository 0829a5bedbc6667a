"""What a cross-process change notification carries (core/store/change_feed.py)."""

from __future__ import annotations

from core.store.change_feed import MAX_PAYLOAD_BYTES, SharedChange, merged


def test_a_change_round_trips_through_its_notification_payload() -> None:
    change = SharedChange(origin="a", sessions=("s1", "s2"), places=("p",), generations=("s1",), platforms=True)
    assert SharedChange.decode(change.encode()) == change


def test_a_change_too_large_for_a_notification_says_reload_everything() -> None:
    many = tuple(f"session-{i:06d}" for i in range(MAX_PAYLOAD_BYTES // 10))
    decoded = SharedChange.decode(SharedChange(origin="a", sessions=many).encode())
    assert decoded is not None and decoded.everything and decoded.sessions == ()


def test_changes_heard_together_are_read_back_once_with_every_key() -> None:
    one = merged([SharedChange("a", sessions=("s1",)), SharedChange("b", sessions=("s1", "s2"), platforms=True)])
    assert one.sessions == ("s1", "s2") and one.platforms and not one.everything


def test_a_foreign_payload_is_ignored() -> None:
    assert SharedChange.decode("not json") is None
    assert SharedChange.decode('{"no": "origin"}') is None
