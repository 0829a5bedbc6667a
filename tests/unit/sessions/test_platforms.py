"""The platform registry (claims, default claimant, chat-scope declarations) and owner identities."""

from __future__ import annotations

import pytest

from core.errors import InvalidInput
from core.sessions.incoming_message import ChatScope
from core.sessions.platforms import AdapterInstance, OwnerIdentities, PlatformRegistry

TG = AdapterInstance("tg-1", "telegram", "bot", claims=("tg:*", "exact-id"), chat_scopes={"private": False})
TG_2 = AdapterInstance("tg-2", "telegram", "bot", claims=("tg:group:*",))


def test_claims_are_exact_ids_or_prefix_patterns_in_registration_order() -> None:
    # SM-12: the first claimant is the one recorded
    registry = PlatformRegistry([TG, TG_2])
    assert [i.instance_id for i in registry.claimants_of("tg:group:1")] == ["tg-1", "tg-2"]
    assert [i.instance_id for i in registry.claimants_of("exact-id")] == ["tg-1"]
    assert registry.claimants_of("exact-id-2") == []
    assert registry.claimants_of("x", platform="telegram") == []  # telegram is configured: no default


def test_an_unconfigured_platform_is_its_own_claimant() -> None:
    # SM-12
    registry = PlatformRegistry([TG])
    (own,) = registry.claimants_of("anything", platform="matrix", instance="matrix-home")
    assert (own.instance_id, own.platform) == ("matrix-home", "matrix")
    (named,) = registry.claimants_of("anything", platform="matrix")
    assert named.instance_id == "matrix"


def test_instances_can_be_registered_replaced_and_removed_at_run_time() -> None:
    registry = PlatformRegistry()
    registry.register(TG)
    registry.register(AdapterInstance("tg-1", "telegram", claims=()))
    assert registry.claimants_of("tg:1") == []
    assert registry.unregister("tg-1") and not registry.unregister("tg-1")
    assert registry.instances() == []
    with pytest.raises(InvalidInput):
        AdapterInstance("", "telegram")


def test_declarations_win_over_message_flags_and_explicit_message_declarations_are_remembered() -> None:
    # SM-26: only an explicit declaration makes a window one-to-one
    registry = PlatformRegistry([TG])
    assert registry.resolve_multi_party("telegram", ChatScope("private", "u", True)) is False
    assert registry.is_declared_one_to_one("telegram", "private")
    inferred = ChatScope("dm", "u", False)
    assert registry.resolve_multi_party("discord", inferred) is False
    assert not registry.is_declared_one_to_one("discord", "dm")
    registry.note_message_declaration("discord", ChatScope("dm", "u", False, declared_one_to_one=True))
    assert registry.is_declared_one_to_one("discord", "dm")


def test_owner_identities() -> None:
    owners = OwnerIdentities([("telegram", "1"), ("discord", "")])
    assert owners.is_owner("telegram", "1") and not owners.is_owner("discord", "1")
    assert not owners.is_owner("discord", "") and len(owners) == 1
