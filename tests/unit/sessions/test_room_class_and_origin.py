"""SM-9 room_class (table-driven over each seed branch), SM-10 origin_chat_of, SM-11 from_elsewhere."""

from __future__ import annotations

import pytest

from core.sessions.incoming_message import IncomingMessage
from core.sessions.records import OriginChat, SessionRecord
from core.sessions.rules import from_elsewhere, origin_chat_of, room_class

from .records_for_tests import lookup_of, rec, room, webui


def is_owner(platform: str, user_id: str) -> bool:
    return (platform, user_id) == ("telegram", "owner-1")


GROUP = room("group", "telegram", "group", "g-1", multi=True)
OWNER_DM = room("owner-dm", "telegram", "private", "owner-1", multi=False)
STRANGER_DM = room("stranger-dm", "telegram", "private", "u-9", multi=False)
# SM-9: only the multi-party flag counts, never the type name
GROUP_TYPED_ONE_TO_ONE = room("odd", "telegram", "group", "owner-1", multi=False)
WEBUI = webui("web")
FILED_BY_ID = rec("by-id")
GROUP_CHILD = rec("group-child", parent_id="group")
WEB_CHILD = rec("web-child", parent_id="web")
ORPHAN = rec("orphan", parent_id="missing")
LOOKUP = lookup_of(GROUP, OWNER_DM, STRANGER_DM, GROUP_TYPED_ONE_TO_ONE, WEBUI, FILED_BY_ID, GROUP_CHILD, WEB_CHILD, ORPHAN)


@pytest.mark.rule("SM-9")
@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (GROUP, "room"),  # origin, multi-party
        (OWNER_DM, "owner-only"),  # origin, one-to-one with an owner peer
        (STRANGER_DM, "room"),  # origin, other one-to-one
        (GROUP_TYPED_ONE_TO_ONE, "owner-only"),  # judged by the flag, not the type name
        (WEBUI, "owner-only"),  # no origin, created_from
        (FILED_BY_ID, "internal"),  # filed by id
        (GROUP_CHILD, "room"),  # a child uses its root
        (WEB_CHILD, "owner-only"),
        (ORPHAN, "internal"),  # broken chain
        (None, "internal"),  # not in the table
    ],
)
def test_room_class_follows_the_roots_origin(record: SessionRecord | None, expected: str) -> None:
    # SM-9
    assert room_class(record, LOOKUP, is_owner) == expected


@pytest.mark.rule("SM-10")
def test_origin_chat_of_is_the_roots_chat_or_none() -> None:
    # SM-10
    assert origin_chat_of("group-child", LOOKUP) == OriginChat("group", True, "g-1")
    assert origin_chat_of("web", LOOKUP) is None
    assert origin_chat_of("unknown", LOOKUP) is None
    assert origin_chat_of("group", None) is None


def _message(session_id: str | None, platform: str) -> IncomingMessage:
    return IncomingMessage(id="m", session_id=session_id, platform=platform)


@pytest.mark.rule("SM-11")
@pytest.mark.parametrize(
    ("session_id", "platform", "elsewhere"),
    [
        ("group", "webui", True),  # the owner typing into the group from the WebUI
        ("group-child", "webui", True),  # a child uses its root
        ("group", "telegram", False),
        ("web", "telegram", False),  # no origin platform: cannot tell → False
        ("unknown", "webui", False),
        (None, "webui", False),
    ],
)
def test_from_elsewhere_compares_the_entry_platform_with_the_origin(
    session_id: str | None, platform: str, elsewhere: bool
) -> None:
    # SM-11
    assert from_elsewhere(_message(session_id, platform), LOOKUP) is elsewhere


@pytest.mark.rule("SM-11")
def test_from_elsewhere_without_a_manager_is_false() -> None:
    # SM-11
    assert from_elsewhere(_message("group", "webui"), None) is False
