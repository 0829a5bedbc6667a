"""SM-27 place_of, table-driven over each seed branch."""

from __future__ import annotations

import pytest

from core.sessions.records import OriginChat, SessionPlace
from core.sessions.rules import IsOwner, place_of

from .records_for_tests import lookup_of, rec, room, webui


def is_owner(platform: str, user_id: str) -> bool:
    return (platform, user_id) == ("telegram", "owner-1")


WORKSPACES = {"ws-1"}
RECORDS = lookup_of(
    room("group-bot-a", "telegram", "group", "g-1", multi=True, self_id="bot-a"),
    room("group-bot-b", "telegram", "group", "g-1", multi=True, self_id="bot-b"),
    room("owner-dm", "telegram", "private", "owner-1", multi=False),
    room("stranger-dm", "telegram", "private", "u-9", multi=False),
    rec("no-chat", origin_platform="telegram"),
    rec("empty-target", origin_platform="telegram", origin_chat=OriginChat("group", True, "")),
    webui("project", workspace="ws-1", root="/srv/repo"),
    webui("stale-workspace", workspace="ws-gone", root="/srv/old"),
    webui("web-default"),
    rec("by-id"),
    rec("group-child", parent_id="group-bot-a"),
    rec("project-child", parent_id="project"),
)
DEFAULT = SessionPlace("workspace", "workspace:default")


@pytest.mark.rule("SM-27")
@pytest.mark.parametrize(
    ("session_id", "owner", "expected"),
    [
        ("group-bot-a", is_owner, SessionPlace("window", "telegram:group:g-1")),
        # no bot account in the key: two bots in one group share the window
        ("group-bot-b", is_owner, SessionPlace("window", "telegram:group:g-1")),
        ("owner-dm", is_owner, DEFAULT),  # the owner's own DM lives in the default workspace
        ("stranger-dm", is_owner, SessionPlace("window", "telegram:private:u-9")),
        ("owner-dm", None, SessionPlace("window", "telegram:private:owner-1")),  # no authority
        ("no-chat", is_owner, SessionPlace("window", "telegram::")),  # bad data: still a window
        ("empty-target", is_owner, SessionPlace("window", "telegram:group:")),
        ("project", is_owner, SessionPlace("workspace", "workspace:ws-1")),
        ("stale-workspace", is_owner, DEFAULT),  # recorded workspace without a record
        ("web-default", is_owner, DEFAULT),
        ("by-id", is_owner, DEFAULT),  # unfiled
        ("unknown", is_owner, DEFAULT),
        ("group-child", is_owner, SessionPlace("window", "telegram:group:g-1")),  # by the root
        ("project-child", is_owner, SessionPlace("workspace", "workspace:ws-1")),
    ],
)
def test_place_of_each_branch(session_id: str, owner: IsOwner | None, expected: SessionPlace) -> None:
    # SM-27
    assert place_of(session_id, RECORDS, owner, WORKSPACES) == expected


@pytest.mark.rule("SM-27")
def test_bad_window_data_and_missing_workspaces_are_reported() -> None:
    # SM-27
    reports: list[tuple[str, str]] = []
    place_of("no-chat", RECORDS, is_owner, WORKSPACES, lambda sid, why: reports.append((sid, why)))
    place_of("stale-workspace", RECORDS, is_owner, WORKSPACES, lambda sid, why: reports.append((sid, why)))
    assert [sid for sid, _ in reports] == ["no-chat", "stale-workspace"]
