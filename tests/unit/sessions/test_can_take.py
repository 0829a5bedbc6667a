"""SM-24 can_take (table-driven, each seed branch in order), SM-25 take_from, SM-26 one_to_one_with."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC

import pytest

from core.sessions.records import SessionRecord, TakeSettings
from core.sessions.take import (
    TAKE_CROSS_BOT_ACCOUNT,
    TAKE_OK,
    TAKE_OTHER_GROUP,
    TAKE_OTHER_PLATFORM,
    TAKE_OTHERS_DM,
    TAKE_SCOPE_SESSION,
    TAKE_UNKNOWN,
    Principal,
    TakeVerdict,
    can_take,
    deny,
    one_to_one_with,
    take_from,
)
from core.sessions.text import TextRef

from .records_for_tests import lookup_of, rec, room, webui

OWNER = Principal("telegram", "owner-1")
STRANGER = Principal("telegram", "u-9")
OWNER_ON_DISCORD = Principal("discord", "owner-d")


def is_owner(platform: str, user_id: str) -> bool:
    return (platform, user_id) in {("telegram", "owner-1"), ("discord", "owner-d")}


def declared(root: SessionRecord) -> bool:
    return root.origin_chat is not None and root.origin_chat.type == "private"


ALL = TakeSettings(scope="all")
ALL_OPEN = TakeSettings("all", cross_bot_account=True, read_other_groups=True, read_others_dms=True)
TARGETS = [
    room("group-a", "telegram", "group", "g-1", multi=True, self_id="bot-a"),
    room("group-b", "telegram", "group", "g-2", multi=True, self_id="bot-b"),
    room("group-a2", "telegram", "group", "g-3", multi=True, self_id="bot-a"),
    room("stranger-dm", "telegram", "private", "u-9", multi=False, self_id="bot-a"),
    room("owner-dm", "telegram", "private", "owner-1", multi=False),
    room("inferred-dm", "telegram", "chat", "u-9", multi=False),  # one-to-one, not declared
    room("discord-group", "discord", "guild", "d-1", multi=True, self_id="bot-x"),
    webui("web-target"),
    webui("cli-target", created_from="cli"),
    rec("unfiled"),
    rec("no-chat", origin_platform="telegram"),
    rec("orphan", parent_id="gone"),
    rec("group-a-child", parent_id="group-a"),
]


def verdict(current: SessionRecord, target_id: str, principal: Principal | None = None) -> TakeVerdict:
    lookup = lookup_of(*[t for t in TARGETS if t.id != current.id], current)
    return can_take(current.id, target_id, principal, lookup=lookup, is_owner=is_owner, declared_one_to_one=declared)


def current_in_group(settings: TakeSettings | None, self_id: str = "bot-a") -> SessionRecord:
    base = room("current", "telegram", "group", "g-0", multi=True, self_id=self_id)
    return replace(base, take_settings=settings)


def current_in_webui(settings: TakeSettings | None) -> SessionRecord:
    return replace(webui("current"), take_settings=settings)


CASES: list[tuple[str, SessionRecord, str, Principal | None, TakeVerdict]] = [
    # (1) same id, or the same resolvable root
    ("same id, even unknown", rec("current"), "current", None, TAKE_OK),
    ("same root, scope session", current_in_group(None), "current", None, TAKE_OK),
    ("child of the same root, scope session", TARGETS[0], "group-a-child", None, TAKE_OK),
    ("same-looking chat but another root", replace(TARGETS[0], id="current"), "group-a-child", None, deny(TAKE_SCOPE_SESSION)),
    # (2) unresolvable roots
    ("target not in table", current_in_group(ALL_OPEN), "nowhere", None, deny(TAKE_UNKNOWN)),
    ("target unfiled", current_in_group(ALL_OPEN), "unfiled", None, deny(TAKE_UNKNOWN)),
    ("target origin without chat", current_in_group(ALL_OPEN), "no-chat", None, deny(TAKE_UNKNOWN)),
    ("target broken chain", current_in_group(ALL_OPEN), "orphan", None, deny(TAKE_UNKNOWN)),
    ("current unfiled", replace(rec("current"), take_settings=ALL_OPEN), "group-a", None, deny(TAKE_UNKNOWN)),
    # (3) scope
    ("default scope is session", current_in_group(None), "group-a", OWNER, deny(TAKE_SCOPE_SESSION)),
    ("scope session", current_in_group(TakeSettings("session", True, True, True)), "group-a", OWNER, deny(TAKE_SCOPE_SESSION)),
    ("same-platform, other IM platform", current_in_group(TakeSettings("same-platform", True, True, True)), "discord-group", OWNER, deny(TAKE_OTHER_PLATFORM)),
    ("same-platform, webui vs cli", current_in_webui(TakeSettings("same-platform", read_others_dms=True)), "cli-target", OWNER, deny(TAKE_OTHER_PLATFORM)),
    ("same-platform, webui vs webui", current_in_webui(TakeSettings("same-platform")), "web-target", OWNER, TAKE_OK),
    ("scope all skips the platform check", current_in_group(TakeSettings("all", read_other_groups=True)), "discord-group", OWNER, TAKE_OK),
    # (4) by target: another bot account
    ("other bot account needs the toggle", current_in_group(TakeSettings("all", read_other_groups=True)), "group-b", OWNER, deny(TAKE_CROSS_BOT_ACCOUNT)),
    ("other bot account with the toggle", current_in_group(ALL_OPEN), "group-b", OWNER, TAKE_OK),
    ("same bot account", current_in_group(TakeSettings("all", read_other_groups=True)), "group-a2", OWNER, TAKE_OK),
    ("no self_id on one side: no bot check", current_in_group(TakeSettings("all", read_other_groups=True), self_id=""), "group-b", OWNER, TAKE_OK),
    # (4) multi-party target
    ("group needs read_other_groups", current_in_group(ALL), "group-a", OWNER, deny(TAKE_OTHER_GROUP)),
    # (4) one-to-one target
    ("own DM with the principal", current_in_group(ALL), "stranger-dm", STRANGER, TAKE_OK),
    ("someone else's DM", current_in_group(ALL), "stranger-dm", OWNER_ON_DISCORD, deny(TAKE_OTHERS_DM)),
    ("someone else's DM with the toggle", current_in_group(TakeSettings("all", read_others_dms=True)), "stranger-dm", None, TAKE_OK),
    ("owner DM, principal another owner identity", current_in_group(ALL), "owner-dm", OWNER_ON_DISCORD, TAKE_OK),
    ("undeclared one-to-one is not own", current_in_group(ALL), "inferred-dm", STRANGER, deny(TAKE_OTHERS_DM)),
    ("no principal", current_in_group(ALL), "stranger-dm", None, deny(TAKE_OTHERS_DM)),
    ("principal with empty account", current_in_group(ALL), "stranger-dm", Principal("telegram", ""), deny(TAKE_OTHERS_DM)),
    ("webui counts as one-to-one with the owner", current_in_group(ALL), "web-target", OWNER, TAKE_OK),
    ("webui target, non-owner principal", current_in_group(ALL), "web-target", STRANGER, deny(TAKE_OTHERS_DM)),
    ("owner is bound by the settings too", current_in_group(None), "web-target", OWNER, deny(TAKE_SCOPE_SESSION)),
]


@pytest.mark.rule("SM-24")
@pytest.mark.parametrize(("case", "current", "target", "principal", "expected"), CASES, ids=[c[0] for c in CASES])
def test_can_take(case: str, current: SessionRecord, target: str, principal: Principal | None, expected: TakeVerdict) -> None:
    # SM-24
    assert verdict(current, target, principal) == expected


@pytest.mark.rule("SM-24")
def test_a_child_uses_its_roots_take_settings_unless_it_has_its_own() -> None:
    # SM-24
    parent = current_in_group(ALL_OPEN)
    child = rec("kid", parent_id="current")
    lookup = lookup_of(*TARGETS, parent, child)
    assert can_take("kid", "group-a", None, lookup=lookup, is_owner=is_owner, declared_one_to_one=declared) == TAKE_OK
    strict = replace(child, take_settings=TakeSettings())
    lookup = lookup_of(*TARGETS, parent, strict)
    assert can_take("kid", "group-a", None, lookup=lookup, is_owner=is_owner, declared_one_to_one=declared) == deny(TAKE_SCOPE_SESSION)


@pytest.mark.rule("SM-24")
def test_refusal_reasons_are_text_objects_without_platform_names() -> None:
    # SM-24
    for reason in (TAKE_UNKNOWN, TAKE_SCOPE_SESSION, TAKE_OTHER_PLATFORM, TAKE_CROSS_BOT_ACCOUNT, TAKE_OTHER_GROUP, TAKE_OTHERS_DM):
        assert isinstance(reason, TextRef)
        for text in (reason.source(UTC), reason.render("zh")):
            assert text and not any(p in text.lower() for p in ("telegram", "discord", "qq", "webui", "cli"))


class _Checker:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Principal | None]] = []

    def can_take(self, current_id: str, target_id: str, principal: Principal | None = None) -> TakeVerdict:
        self.calls.append((current_id, target_id, principal))
        return deny(TAKE_OTHER_GROUP)


@pytest.mark.rule("SM-25")
def test_take_from_without_a_manager_allows_only_the_same_id() -> None:
    # SM-25
    assert take_from(None, "a", "a") == TAKE_OK
    assert take_from(None, "a", "b", OWNER) == deny(TAKE_UNKNOWN)


@pytest.mark.rule("SM-25")
def test_take_from_with_a_manager_asks_can_take() -> None:
    # SM-25
    checker = _Checker()
    assert take_from(checker, "a", "a", OWNER) == deny(TAKE_OTHER_GROUP)
    assert checker.calls == [("a", "a", OWNER)]


DM = room("dm", "telegram", "private", "u-9", multi=False)
OWNER_DM = room("odm", "telegram", "private", "owner-1", multi=False)


@pytest.mark.rule("SM-26")
@pytest.mark.parametrize(
    ("target", "principal", "is_declared", "owner_check", "expected"),
    [
        (DM, STRANGER, True, None, True),  # the peer is the principal's account
        (DM, STRANGER, False, None, False),  # not declared (inferred) → no
        (DM, Principal("discord", "u-9"), True, None, False),  # same account id, other platform
        (DM, None, True, is_owner, False),  # no principal
        (DM, Principal("telegram", ""), True, is_owner, False),  # empty account
        (OWNER_DM, OWNER_ON_DISCORD, True, is_owner, True),  # both owner identities
        (OWNER_DM, OWNER_ON_DISCORD, True, None, False),  # ... only when is_owner is given
        (DM, OWNER_ON_DISCORD, True, is_owner, False),  # peer not an owner
    ],
)
def test_one_to_one_with(target: SessionRecord, principal: Principal | None, is_declared: bool, owner_check: object, expected: bool) -> None:
    # SM-26
    assert one_to_one_with(target, principal, is_declared, owner_check) is expected  # type: ignore[arg-type]
